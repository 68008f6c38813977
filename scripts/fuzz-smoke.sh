#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.cpp) with clang in BUILD_DIR and runs each
# for SECONDS from a copy of its seed corpus (tests/fuzz/corpus/<target>/; the repository is
# never written). Fails when a target crashes, hangs, leaks, trips a sanitizer or throws an
# error type its parser does not document; the input that did it is kept under
# BUILD_DIR/fuzz-artifacts/ with the command that replays it.
#
#   scripts/fuzz-smoke.sh [BUILD_DIR [SECONDS]]      # defaults: build-fuzz 60
#
# More: docs/fuzzing.md. Needs clang and libclang-rt-14-dev (scripts/install-deps.sh).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build-fuzz}"
seconds="${2:-60}"
jobs="${AXONN_FUZZ_BUILD_JOBS:-2}"
case "$seconds" in '' | *[!0-9]*)
  echo "fuzz-smoke: SECONDS must be a whole number of seconds, got '$seconds'" >&2
  exit 2
  ;;
esac

mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DAXONN_FUZZ=ON -DAXONN_CUDA=OFF -DAXONN_TESTS=OFF \
  -DAXONN_BENCH=OFF >"$build/fuzz-configure.log" 2>&1 || {
  cat "$build/fuzz-configure.log" >&2
  echo "fuzz-smoke: configuring $build failed (log above)" >&2
  exit 1
}
cmake --build "$build" --target fuzz_targets -j "$jobs"

artifacts="$(cd "$build" && pwd)/fuzz-artifacts"
mkdir -p "$artifacts"
work="$(mktemp -d "${TMPDIR:-/tmp}/axonn-fuzz-smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT

failed=()
for source in "$root"/tests/fuzz/fuzz_*.cpp; do
  name="$(basename "$source" .cpp)"
  seeds="$root/tests/fuzz/corpus/$name"
  if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
    echo "fuzz-smoke: $name has no seed corpus; add inputs under tests/fuzz/corpus/$name/" >&2
    failed+=("$name")
    continue
  fi
  if [ ! -x "$build/fuzz/$name" ]; then
    echo "fuzz-smoke: $name was not built; add it to tests/fuzz/CMakeLists.txt with axonn_fuzz_target" >&2
    failed+=("$name")
    continue
  fi
  corpus="$work/$name"
  cp -r "$seeds" "$corpus"
  options=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
           -artifact_prefix="$artifacts/$name-")
  if [ -f "$root/tests/fuzz/$name.dict" ]; then options+=(-dict="$root/tests/fuzz/$name.dict"); fi
  log="$work/$name.log"
  echo "fuzz-smoke: $name for ${seconds} s from $(ls "$seeds" | wc -l) seeds"
  if "$build/fuzz/$name" "${options[@]}" "$corpus" >"$log" 2>&1; then
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    echo "fuzz-smoke: $name ok: ${runs:-?} inputs, corpus $(ls "$seeds" | wc -l) -> $(ls "$corpus" | wc -l)"
  else
    tail -n 60 "$log" >&2
    echo "fuzz-smoke: $name FAILED (log tail above); replay: $build/fuzz/$name $artifacts/$name-*" >&2
    failed+=("$name")
  fi
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz-smoke: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz-smoke: every target ran ${seconds} s without a finding"
