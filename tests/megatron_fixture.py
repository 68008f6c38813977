#!/usr/bin/python3
"""Writes a Megatron-LM indexed dataset pair (PREFIX.bin + PREFIX.idx) byte for byte as
Megatron's IndexedDatasetBuilder and _IndexWriter write it (megatron/core/datasets/
indexed_dataset.py), transcribed from the format rather than imported, so the tests compare
axonn's reader and writer against an independent writer.

    megatron_fixture.py DOCS PREFIX [--dtype uint16|int32|...] [--vocab V] [--modes]

DOCS: one document per line, token ids separated by spaces (an empty line is an empty
document). Each document is one sequence, as preprocess_data.py writes it without
--split-sentences. --vocab V picks the dtype as Megatron's DType.optimal_dtype does (uint16
below 65500, else int32); --dtype names it. --modes writes a multimodal builder's int8
sequence modes (all 0, text) after the document indices.

Used at test time (tests/test_megatron_dataset.cpp, tests/test_train_megatron.cpp), so the
fixtures are made from the tests' own tokens and no binary fixture is committed.
"""
import argparse
import struct

import numpy

HEADER = b"MMIDIDX\x00\x00"
CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("docs")
    parser.add_argument("prefix")
    parser.add_argument("--dtype")
    parser.add_argument("--vocab", type=int)
    parser.add_argument("--modes", action="store_true")
    args = parser.parse_args()
    if args.dtype:
        dtype = getattr(numpy, args.dtype)
    else:
        dtype = numpy.uint16 if args.vocab is not None and args.vocab < 65500 else numpy.int32

    with open(args.docs) as f:
        documents = [[int(t) for t in line.split()] for line in f.read().split("\n")[:-1]]

    # The builder: the .bin is each document's tokens appended; the index keeps the lengths and
    # document_indices = [0] + the sequence count after each document.
    sequence_lengths = []
    document_indices = [0]
    with open(args.prefix + ".bin", "wb") as data:
        for doc in documents:
            data.write(numpy.array(doc, dtype=dtype).tobytes(order="C"))
            sequence_lengths.append(len(doc))
            document_indices.append(len(sequence_lengths))

    # The index writer: header, counts, lengths, pointers (running byte offsets), document indices.
    itemsize = numpy.dtype(dtype).itemsize
    pointers = []
    offset = 0
    for length in sequence_lengths:
        pointers.append(offset)
        offset += length * itemsize
    with open(args.prefix + ".idx", "wb") as idx:
        idx.write(HEADER)
        idx.write(struct.pack("<Q", 1))
        idx.write(struct.pack("<B", CODES[numpy.dtype(dtype).name]))
        idx.write(struct.pack("<Q", len(sequence_lengths)))
        idx.write(struct.pack("<Q", len(document_indices)))
        idx.write(numpy.array(sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
        idx.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
        idx.write(numpy.array(document_indices, dtype=numpy.int64).tobytes(order="C"))
        if args.modes:
            idx.write(numpy.zeros(len(sequence_lengths), dtype=numpy.int8).tobytes(order="C"))


if __name__ == "__main__":
    main()
