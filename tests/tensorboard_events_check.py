"""A run directory's TensorBoard events files hold exactly its metrics.jsonl, read without
TensorBoard (not packaged for Debian 12) and without axonn's C++: the TFRecord framing parsed
here, both masked CRC-32Cs checked with the crc32c module (python3-crc32c), each record decoded
with the Python classes protoc generates from trainer/train/tensorboard_event.proto
(python3-protobuf).

usage: /usr/bin/python3 tensorboard_events_check.py --proto-python DIR [--files N] RUN_DIR
  DIR      the folder holding tensorboard_event_pb2.py (<build>/generated/trainer/train)
  --files  how many events files RUN_DIR must hold (one per process that trained)

Checks that every events file starts with the file_version event "brain.Event:2", that its
other records are scalar summaries, and that the steps of all files, taken in the order they
were started (their first wall_time), are metrics.jsonl's lines one for one: the same step and
every scalar equal to the line's number as far as float32 (TensorBoard's simple_value) and
the digits metrics.jsonl prints allow. The steps must be consecutive across files, so a
resumed run's file continues the curves of the one before.
Exit 0 and "ok: ..." on success; a message naming the file, record, step or tag and exit 1 otherwise.
"""
import argparse
import decimal
import json
import math
import os
import struct
import sys

import crc32c

# metrics.jsonl's key, the TensorBoard tag, and the significant digits metrics_log.cpp prints
# it with (%.9g or %.6g). The moe/ tags are present exactly when the line has balance_loss.
DENSE_FIELDS = [
    ("loss", "train/loss", 9),
    ("lr", "train/lr", 9),
    ("grad_norm", "train/grad_norm", 9),
    ("tokens_per_s", "perf/tokens_per_s", 6),
    ("flops_per_s", "perf/flops_per_s", 6),
    ("mfu", "perf/mfu", 6),
    ("step_s", "perf/step_s", 6),
    ("predicted_step_s", "perf/predicted_step_s", 6),
    ("cpu_s", "perf/cpu_s", 6),
]
MOE_FIELDS = [
    ("balance_loss", "moe/balance_loss", 9),
    ("dropped_fraction", "moe/dropped_fraction", 6),
    ("expert_load", "moe/expert_load", 6),
]
FILE_VERSION = "brain.Event:2"


class Mismatch(Exception):
    pass


def masked_crc(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """The data of each TFRecord record: u64 length, u32 masked CRC of it, data, u32 masked CRC of data."""
    with open(path, "rb") as f:
        blob = f.read()
    records, at = [], 0
    while at < len(blob):
        where = f"{path}: record {len(records)} at byte {at}"
        if len(blob) - at < 12:
            raise Mismatch(f"{where}: {len(blob) - at} bytes left, a record header has 12")
        header = blob[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8 : at + 12])
        if masked_crc(header) != length_crc:
            raise Mismatch(
                f"{where}: the length's CRC is {length_crc:#010x}, its bytes give {masked_crc(header):#010x}")
        end = at + 12 + length
        if end + 4 > len(blob):
            raise Mismatch(f"{where}: length {length} runs past the end of the file ({len(blob)} bytes)")
        data = blob[at + 12 : end]
        (data_crc,) = struct.unpack("<I", blob[end : end + 4])
        if masked_crc(data) != data_crc:
            raise Mismatch(f"{where}: the data's CRC is {data_crc:#010x}, its bytes give {masked_crc(data):#010x}")
        records.append(data)
        at = end + 4
    return records


def read_events_file(path, pb2):
    """(start wall_time, [(step, {tag: value})]) of one events file."""
    events = []
    for i, data in enumerate(read_records(path)):
        event = pb2.Event()
        try:
            event.ParseFromString(data)
        except Exception as e:  # the protobuf runtime's DecodeError, whichever implementation
            raise Mismatch(f"{path}: record {i} is not an Event: {e}")
        events.append(event)
    if not events or events[0].WhichOneof("what") != "file_version" or events[0].file_version != FILE_VERSION:
        raise Mismatch(f"{path}: the first record is not the file_version event {FILE_VERSION!r}")
    if events[0].wall_time < 1e9:
        raise Mismatch(f"{path}: the file_version event's wall_time {events[0].wall_time} is no Unix time")
    steps = []
    for i, event in enumerate(events[1:], start=1):
        if event.WhichOneof("what") != "summary":
            raise Mismatch(f"{path}: record {i} (step {event.step}) is {event.WhichOneof('what')}, not a summary")
        if event.wall_time < 1e9:
            raise Mismatch(f"{path}: record {i} (step {event.step}): wall_time {event.wall_time} is no Unix time")
        scalars = {}
        for value in event.summary.value:
            if value.WhichOneof("value") != "simple_value":
                raise Mismatch(f"{path}: step {event.step}, tag {value.tag!r}: no simple_value")
            if value.tag in scalars:
                raise Mismatch(f"{path}: step {event.step}: tag {value.tag!r} twice")
            scalars[value.tag] = value.simple_value
        steps.append((event.step, scalars))
    if not steps:
        raise Mismatch(f"{path}: no step after the file_version event")
    return events[0].wall_time, steps


def agrees(event_value, text, digits):
    """Whether a float32 event value can be the value metrics.jsonl printed as `text` to `digits`
    significant digits: both are roundings of one double, so they differ by at most half a unit
    of the printed last digit plus one float32 ulp."""
    text = decimal.Decimal(text)  # JSON gives an int for a whole number ("%.9g" of 5.0 is "5")
    printed = float(text)
    if text == 0:
        return event_value == 0
    half_digit = 0.5 * 10.0 ** (text.adjusted() - digits + 1)
    float32_ulp = 2.0 ** (math.frexp(printed)[1] - 24)
    return abs(event_value - printed) <= half_digit + float32_ulp


def check(run_dir, pb2, files_expected):
    names = sorted(n for n in os.listdir(run_dir) if n.startswith("events.out.tfevents."))
    if files_expected is not None and len(names) != files_expected:
        listed = ", ".join(names) or "none"
        raise Mismatch(f"{run_dir}: {len(names)} events files ({listed}), expected {files_expected}")
    paths = [os.path.join(run_dir, n) for n in names]
    files = sorted((read_events_file(p, pb2) + (p,) for p in paths), key=lambda f: (f[0], f[2]))

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(line, parse_float=decimal.Decimal) for line in f if line.strip()]
    events = [(name, step, scalars) for _, steps, name in files for step, scalars in steps]
    if len(events) != len(lines):
        raise Mismatch(f"{run_dir}: the events files hold {len(events)} steps, metrics.jsonl {len(lines)} lines")

    for (name, step, scalars), line, previous in zip(events, lines, [None] + events[:-1]):
        if step != line["step"]:
            raise Mismatch(f"{name}: step {step} where metrics.jsonl has step {line['step']}")
        if previous is not None and step != previous[1] + 1:
            raise Mismatch(f"{name}: step {step} follows step {previous[1]} ({previous[0]}): the steps do not continue")
        fields = DENSE_FIELDS + (MOE_FIELDS if "balance_loss" in line else [])
        expected_tags = {tag for _, tag, _ in fields}
        if set(scalars) != expected_tags:
            raise Mismatch(f"{name}: step {step} has tags {sorted(scalars)}, expected {sorted(expected_tags)}")
        for key, tag, digits in fields:
            if not agrees(scalars[tag], line[key], digits):
                raise Mismatch(
                    f"{name}: step {step}, tag {tag}: {scalars[tag]!r} but metrics.jsonl's {key} is {line[key]}")
    per_file = " + ".join(str(len(steps)) for _, steps, _ in files)
    return f"ok: {len(files)} events files, steps {events[0][1]}-{events[-1][1]} ({per_file}), as metrics.jsonl"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proto-python", required=True, help="folder holding tensorboard_event_pb2.py")
    ap.add_argument("--files", type=int, help="how many events files the run directory must hold")
    ap.add_argument("run_dir")
    args = ap.parse_args()
    sys.path.insert(0, args.proto_python)
    import tensorboard_event_pb2 as pb2

    try:
        print(check(args.run_dir, pb2, args.files))
    except Mismatch as e:
        sys.exit(f"tensorboard_events_check: {e}")


if __name__ == "__main__":
    main()
