#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.cpp) with clang in BUILD_DIR and runs each
# for SECONDS from a copy of its seed corpus (tests/fuzz/corpus/<target>/; the repository is
# never written). Fails when a target crashes, hangs, leaks, trips a sanitizer or throws an
# error type its parser does not document; the input that did it is kept under
# BUILD_DIR/fuzz-artifacts/ with the command that replays it. Targets run side by side, one
# per core (AXONN_FUZZ_PARALLEL=N to change).
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

# Each libFuzzer process is single-threaded: run as many side by side as there are cores
# (AXONN_FUZZ_PARALLEL overrides), each for the full SECONDS.
parallel="${AXONN_FUZZ_PARALLEL:-$(nproc)}"

# Starts one target in the background; its log and exit status land in $work/<name>.{log,rc}.
start_target() {
  local name="$1" seeds="$root/tests/fuzz/corpus/$1" corpus="$work/$1"
  cp -r "$seeds" "$corpus"
  local options=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
                 -artifact_prefix="$artifacts/$name-")
  if [ -f "$root/tests/fuzz/$name.dict" ]; then options+=(-dict="$root/tests/fuzz/$name.dict"); fi
  echo "fuzz-smoke: $name for ${seconds} s from $(ls "$seeds" | wc -l) seeds"
  ( if "$build/fuzz/$name" "${options[@]}" "$corpus" >"$work/$name.log" 2>&1; then echo 0; else echo 1; fi \
      >"$work/$name.rc" ) &
}

# Reports a finished target; a failure goes into `failed`.
report_target() {
  local name="$1" log="$work/$1.log"
  if [ "$(cat "$work/$name.rc")" = 0 ]; then
    local runs
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    echo "fuzz-smoke: $name ok: ${runs:-?} inputs, corpus $(ls "$root/tests/fuzz/corpus/$name" | wc -l) -> $(ls "$work/$name" | wc -l)"
  else
    tail -n 60 "$log" >&2
    echo "fuzz-smoke: $name FAILED (log tail above); replay: $build/fuzz/$name $artifacts/$name-*" >&2
    failed+=("$name")
  fi
}

failed=()
ready=()
for source in "$root"/tests/fuzz/fuzz_*.cpp; do
  name="$(basename "$source" .cpp)"
  if [ -z "$(ls -A "$root/tests/fuzz/corpus/$name" 2>/dev/null)" ]; then
    echo "fuzz-smoke: $name has no seed corpus; add inputs under tests/fuzz/corpus/$name/" >&2
    failed+=("$name")
  elif [ ! -x "$build/fuzz/$name" ]; then
    echo "fuzz-smoke: $name was not built; add it to tests/fuzz/CMakeLists.txt with axonn_fuzz_target" >&2
    failed+=("$name")
  else
    ready+=("$name")
  fi
done

for ((first = 0; first < ${#ready[@]}; first += parallel)); do
  batch=("${ready[@]:first:parallel}")
  for name in "${batch[@]}"; do start_target "$name"; done
  wait
  for name in "${batch[@]}"; do report_target "$name"; done
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz-smoke: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz-smoke: every target ran ${seconds} s without a finding"
