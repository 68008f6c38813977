"""What an h5py user sees: index.h5 of a committed step (possibly after the directory was
moved) opens with h5py, every tensor is a virtual dataset with relative source file names,
and reading it whole gives exactly the tensor of the safetensors export.

usage: /usr/bin/python3 checkpoint_h5py_check.py <step_dir> <export.safetensors>
Exit 0 and "ok: N tensors" on success; a message and exit 1 otherwise.
"""
import json
import os
import struct
import sys

import h5py
import numpy as np


def read_safetensors(path):
    """The safetensors layout, parsed by hand: u64 LE header length, JSON header, raw data."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        begin, end = meta["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(meta["shape"])
    return header.get("__metadata__", {}), tensors


def main():
    step_dir, st_path = sys.argv[1], sys.argv[2]
    meta, exported = read_safetensors(st_path)
    with h5py.File(os.path.join(step_dir, "index.h5"), "r") as index:
        assert index.attrs["magic"] == "AXONNCKP", index.attrs["magic"]
        assert int(index.attrs["format_version"]) == 3
        assert str(int(index.attrs["step"])) == meta["axonn.step"], (index.attrs["step"], meta)
        names = [str(n) for n in index.attrs["tensor_names"]]
        assert sorted(names) == sorted(exported), (names, sorted(exported))
        for name in names:
            ds = index[name]
            assert ds.is_virtual, name
            for src in ds.virtual_sources():
                assert not os.path.isabs(src.file_name), (name, src.file_name)
            # One checksum tile shape per stored rectangle (format versions 2 and 3).
            n = len(ds.attrs["source_rank"])
            assert len(ds.attrs["source_rows_per_block"]) == n, name
            assert len(ds.attrs["source_cols_per_block"]) == n, name
            full = ds[...]
            want = exported[name]
            assert full.shape == want.shape, (name, full.shape, want.shape)
            # Bitwise: compare the float32 bit patterns.
            if not np.array_equal(full.view(np.uint32), want.view(np.uint32)):
                bad = int(np.count_nonzero(full.view(np.uint32) != want.view(np.uint32)))
                print(f"tensor {name}: {bad} elements differ between index.h5 and the export")
                return 1
    print(f"ok: {len(names)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
