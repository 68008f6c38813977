"""A checkpoint step checked against checkpoint/README.md with code that shares nothing with
axonn's: h5py reads the files, python3-xxhash (not libxxhash through our checksum.cpp)
recomputes every hash.

  - shard files: root attributes (magic, format_version, kind, checksum_algorithm,
    slice_count, the types the spec gives); every dataset's tiles hashed as the spec cuts
    them (rows_per_block rows by cols_per_block columns of dimension 1 with all of dimensions
    2 and up, row-major over the grid, each tile's bytes float32 little-endian, its rows in
    order), compared with xxh3_blocks; xxh3 = combine(block hashes), checksum =
    combine(dataset hashes), combine = XXH3-64 of the hashes as little-endian uint64s.
  - index.h5: root attributes and types, tensor_names sorted, the shard lists of one length
    and their checksums the shards'; each tensor's source_* attributes those of the shard
    datasets they name (offsets, counts, tile shape, hashes), its rectangles covering it
    exactly once, and the virtual dataset reading what the shards hold.

usage: /usr/bin/python3 checkpoint_xxh3_check.py STEP_DIR [FORMAT_VERSION]
Exit 0 with "ok: ..." when everything holds; 1 with one line per finding otherwise.
"""
import os
import sys

import h5py
import numpy as np
import xxhash

findings = []


def expect(cond, message):
    if not cond:
        findings.append(message)
    return cond


def combine(hashes):
    return xxhash.xxh3_64_intdigest(b"".join(int(h).to_bytes(8, "little") for h in hashes))


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def expect_attr(where, attrs, name, kind):
    """The attribute exists with the spec's type: 'str', 'i64', 'u64', 'f64'."""
    if not expect(name in attrs, f"{where}: attribute {name} is missing"):
        return None
    value = attrs[name]
    dtype = np.asarray(value).dtype
    ok = {"str": dtype.kind in "OSU", "i64": dtype == np.int64, "u64": dtype == np.uint64,
          "f64": dtype == np.float64}[kind]
    expect(ok, f"{where}: attribute {name} has type {dtype}, the spec says {kind}")
    return value


def check_file_header(where, attrs, kind, version):
    """The root attributes every shard and index file opens with."""
    expect(text(expect_attr(where, attrs, "magic", "str")) == "AXONNCKP", f"{where}: magic is not AXONNCKP")
    expect(int(expect_attr(where, attrs, "format_version", "i64")) == version, f"{where}: format_version is not {version}")
    expect(text(expect_attr(where, attrs, "kind", "str")) == kind, f"{where}: kind is not {kind}")
    expect(text(expect_attr(where, attrs, "checksum_algorithm", "str")) == "XXH3-64", f"{where}: not XXH3-64")


def tiles(data, rows_per_block, cols_per_block):
    """The spec's checksum tiles of a stored rectangle, in block order."""
    rows = data.shape[0]
    cols = data.shape[1] if data.ndim > 1 else 1
    for r in range(0, rows, rows_per_block):
        for c in range(0, cols, cols_per_block):
            tile = data[r:r + rows_per_block] if data.ndim == 1 else data[r:r + rows_per_block, c:c + cols_per_block]
            yield np.ascontiguousarray(tile, dtype="<f4")


def check_shard(path, version):
    where = os.path.basename(path)
    with h5py.File(path, "r") as f:
        a = f.attrs
        check_file_header(where, a, "shard", version)
        for name in ("step", "rank"):
            expect_attr(where, a, name, "i64")
        expect_attr(where, a, "save_token", "str")
        count = int(expect_attr(where, a, "slice_count", "i64"))
        names = [f"slice-{i:05d}" for i in range(count)]
        expect(sorted(n for n in f if n.startswith("slice-")) == names, f"{where}: datasets are not {names}")
        slices, dataset_hashes = {}, []
        for name in names:
            ds = f[name]
            w = f"{where}:/{name}"
            expect(ds.dtype == np.dtype("<f4"), f"{w}: dtype {ds.dtype}, the spec says float32 little-endian")
            da = ds.attrs
            rows_per_block = int(expect_attr(w, da, "rows_per_block", "i64"))
            data = ds[...]
            cols = data.shape[1] if data.ndim > 1 else 1
            if version >= 2:
                cols_per_block = int(expect_attr(w, da, "cols_per_block", "i64"))
            else:
                expect("cols_per_block" not in da, f"{w}: version 1 has no cols_per_block")
                cols_per_block = cols
            blocks = [xxhash.xxh3_64_intdigest(t.tobytes()) for t in tiles(data, rows_per_block, cols_per_block)]
            stored = [int(h) for h in expect_attr(w, da, "xxh3_blocks", "u64")]
            expect(blocks == stored, f"{w}: XXH3-64 of its tiles differs from xxh3_blocks")
            expect(int(expect_attr(w, da, "xxh3", "u64")) == combine(stored), f"{w}: xxh3 is not combine(xxh3_blocks)")
            if version == 3 and ds.chunks is not None and data.ndim > 1:
                expect(ds.chunks[:2] == (rows_per_block, cols_per_block), f"{w}: chunks {ds.chunks} are not its tiles")
            if version < 3:
                expect(ds.chunks is None, f"{w}: version {version} datasets are contiguous")
            expect(ds.compression is None, f"{w}: the spec allows no filters")
            dataset_hashes.append(int(da["xxh3"]))
            slices[name] = dict(tensor=text(da["tensor"]), offset=[int(v) for v in da["offset"]],
                                count=list(data.shape), rows_per_block=rows_per_block, cols_per_block=cols_per_block,
                                xxh3=int(da["xxh3"]), blocks=stored, data=data)
        checksum = int(expect_attr(where, a, "checksum", "u64"))
        expect(checksum == combine(dataset_hashes), f"{where}: checksum is not combine(its datasets' xxh3)")
        return int(a["rank"]), checksum, slices


def check_index(step, version):
    path = os.path.join(step, "index.h5")
    where = "index.h5"
    with h5py.File(path, "r") as f:
        a = f.attrs
        check_file_header(where, a, "index", version)
        for name, kind in (("step", "i64"), ("save_token", "str"), ("layout", "str"), ("model_config", "str"),
                           ("data_cursor", "i64")):
            expect_attr(where, a, name, kind)
        for name in a:
            for prefix, kind in (("meta.int.", "i64"), ("meta.real.", "f64"), ("meta.str.", "str")):
                if name.startswith(prefix):
                    expect_attr(where, a, name, kind)
        tensors = [text(t) for t in expect_attr(where, a, "tensor_names", "str")]
        expect(tensors == sorted(tensors), f"{where}: tensor_names are not sorted")
        ranks = [int(r) for r in expect_attr(where, a, "shard_ranks", "i64")]
        files = [text(s) for s in expect_attr(where, a, "shard_files", "str")]
        sums = [int(s) for s in expect_attr(where, a, "shard_checksums", "u64")]
        data_bytes = [int(b) for b in expect_attr(where, a, "shard_data_bytes", "i64")]
        expect(ranks == sorted(ranks) and len(ranks) == len(files) == len(sums) == len(data_bytes),
               f"{where}: shard lists are not ascending ranks of one length")
        shards = {}
        for rank, name, checksum, nbytes in zip(ranks, files, sums, data_bytes):
            expect(name == f"shard-{rank:05d}.h5", f"{where}: shard file {name} for rank {rank}")
            shard_rank, shard_checksum, slices = check_shard(os.path.join(step, name), version)
            expect(shard_rank == rank, f"{name}: rank {shard_rank}, the index says {rank}")
            expect(shard_checksum == checksum, f"{where}: shard_checksums[{rank}] is not {name}'s checksum")
            expect(nbytes == sum(s["data"].size * 4 for s in slices.values()),
                   f"{where}: shard_data_bytes of {name} is not its float32 payload")
            shards[rank] = slices
        elements = 0
        for name in tensors:
            ds = f[name]
            w = f"{where}: tensor {name}"
            expect(ds.is_virtual, f"{w} is not a virtual dataset")
            ta = ds.attrs
            src_ranks = [int(r) for r in expect_attr(w, ta, "source_rank", "i64")]
            src_sets = [text(s).lstrip("/") for s in expect_attr(w, ta, "source_dataset", "str")]
            offsets = np.asarray(expect_attr(w, ta, "source_offset", "i64"))
            counts = np.asarray(expect_attr(w, ta, "source_count", "i64"))
            rows = [int(r) for r in expect_attr(w, ta, "source_rows_per_block", "i64")]
            hashes = [int(h) for h in expect_attr(w, ta, "source_xxh3", "u64")]
            all_blocks = [int(h) for h in expect_attr(w, ta, "source_xxh3_blocks", "u64")]
            cols = [int(c) for c in expect_attr(w, ta, "source_cols_per_block", "i64")] if version >= 2 else None
            covered = np.zeros(ds.shape, dtype=np.int64)
            whole = np.zeros(ds.shape, dtype=np.float32)
            blocks = []
            for i, (rank, dset) in enumerate(zip(src_ranks, src_sets)):
                s = shards.get(rank, {}).get(dset)
                if not expect(s is not None, f"{w}: source {i} names {dset} of rank {rank}, which does not exist"):
                    continue
                expect(s["tensor"] == name, f"{w}: source {i} is a slice of {s['tensor']}")
                expect(list(offsets[i]) == s["offset"] and list(counts[i]) == s["count"],
                       f"{w}: source {i}'s offset and count are not the shard dataset's")
                expect(rows[i] == s["rows_per_block"] and (cols is None or cols[i] == s["cols_per_block"]),
                       f"{w}: source {i}'s tile shape is not the shard dataset's")
                expect(hashes[i] == s["xxh3"], f"{w}: source_xxh3[{i}] is not the shard dataset's xxh3")
                blocks += s["blocks"]
                region = tuple(slice(o, o + c) for o, c in zip(s["offset"], s["count"]))
                covered[region] += 1
                whole[region] = s["data"]
            expect(all_blocks == blocks, f"{w}: source_xxh3_blocks are not its sources' block hashes in order")
            expect(bool((covered == 1).all()), f"{w}: its rectangles do not cover it exactly once")
            expect(np.array_equal(ds[...], whole), f"{w}: the virtual dataset does not read what the shards hold")
            elements += whole.size
        return len(tensors), len(ranks), elements


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-3])
        return 2
    step = sys.argv[1]
    with h5py.File(os.path.join(step, "index.h5"), "r") as f:
        version = int(f.attrs["format_version"])
    if len(sys.argv) == 3:
        expect(version == int(sys.argv[2]), f"index.h5: format_version {version}, expected {sys.argv[2]}")
    tensors, shards, elements = check_index(step, version)
    for line in findings:
        print(line)
    if findings:
        return 1
    print(f"ok: format version {version}, {tensors} tensors, {shards} shards, {elements} elements: every hash "
          f"recomputed with python-xxhash {xxhash.VERSION} and every attribute as the spec gives it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
