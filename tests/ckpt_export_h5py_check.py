"""`axonn ckpt export` checked against h5py: the safetensors file, parsed by hand with numpy
(8-byte little-endian header length, JSON header, raw little-endian float32), holds exactly
the full tensors h5py reads from the step's index.h5 (virtual datasets over the shards).

usage: /usr/bin/python3 ckpt_export_h5py_check.py <step_dir> <file.safetensors> [--params-only]
--params-only: the file must hold the parameters only (every tensor but adam.m/*, adam.v/*).
Exit 0 and "ok: N tensors, M elements" on success; a message and exit 1 otherwise.
"""
import json
import os
import struct
import sys

import h5py
import numpy as np


def fail(message):
    print(message)
    sys.exit(1)


def read_safetensors(path):
    """Header and tensors; checks the layout the safetensors format requires of a writer."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if n % 8 != 0:
        fail(f"{path}: header length {n} is not a multiple of 8")
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    metadata = header.pop("__metadata__", {})
    tensors, end = {}, 0
    # Tensors in name order, contiguous from offset 0, the data ending with the file.
    for name in sorted(header):
        meta = header[name]
        if meta["dtype"] != "F32":
            fail(f"{name}: dtype {meta['dtype']}, expected F32")
        begin, stop = meta["data_offsets"]
        if begin != end:
            fail(f"{name}: data starts at {begin}, expected {end} (tensors contiguous in name order)")
        count = int(np.prod(meta["shape"], dtype=np.int64))
        if stop - begin != 4 * count:
            fail(f"{name}: {stop - begin} bytes for shape {meta['shape']}")
        tensors[name] = np.frombuffer(data[begin:stop], dtype="<f4").reshape(meta["shape"])
        end = stop
    if end != len(data):
        fail(f"{path}: {len(data) - end} bytes after the last tensor")
    return metadata, tensors


def is_parameter(name):
    return not (name.startswith("adam.m/") or name.startswith("adam.v/"))


def main():
    step_dir, st_path = sys.argv[1], sys.argv[2]
    params_only = sys.argv[3:] == ["--params-only"]
    metadata, exported = read_safetensors(st_path)
    elements = 0
    with h5py.File(os.path.join(step_dir, "index.h5"), "r") as index:
        if index.attrs["magic"] != "AXONNCKP":
            fail(f"magic {index.attrs['magic']!r}")
        for key, attr in (("axonn.step", "step"), ("axonn.layout", "layout"), ("axonn.data_cursor", "data_cursor")):
            want = index.attrs[attr]
            want = str(int(want)) if attr != "layout" else str(want)
            if metadata.get(key) != want:
                fail(f"__metadata__ {key} = {metadata.get(key)!r}, index.h5 has {attr} = {want!r}")
        names = [str(n) for n in index.attrs["tensor_names"]]
        if params_only:
            names = [n for n in names if is_parameter(n)]
        if sorted(names) != sorted(exported):
            fail(f"tensors differ: only in index.h5 {sorted(set(names) - set(exported))}, "
                 f"only in the export {sorted(set(exported) - set(names))}")
        for name in names:
            full = index[name][...]
            want = exported[name]
            if full.shape != want.shape:
                fail(f"tensor {name}: h5py shape {full.shape}, export shape {want.shape}")
            # Bitwise: the float32 bit patterns.
            bad = int(np.count_nonzero(full.view(np.uint32) != want.view(np.uint32)))
            if bad:
                fail(f"tensor {name}: {bad} elements differ between index.h5 and the export")
            elements += full.size
    print(f"ok: {len(names)} tensors, {elements} elements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
