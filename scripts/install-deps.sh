#!/usr/bin/env bash
# Installs every Debian package axonn needs to build, test and benchmark.
# Idempotent and non-interactive; run as root (or with sudo) on Debian 12.
# CUDA and NCCL are not Debian packages here: they are found under /usr/local/cuda
# when present and are optional (AXONN_CUDA=AUTO).
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # libraries the code links
  libtomlplusplus-dev libspdlog-dev libfmt-dev libhdf5-dev libxxhash-dev
  libgtest-dev libgmock-dev libopenblas-dev libgloo-dev libpmix-dev libslurm-dev
  # TensorBoard events files: protobuf-lite messages from protoc, ISA-L's CRC-32C
  libprotobuf-dev protobuf-compiler libisal-dev
  # real Slurm for the `slurm` tests (slurmctld + slurmd + munge on localhost)
  slurm-wlm slurmctld slurmd slurm-client munge
  # a second PMIx launcher to test `axonn train` under
  openmpi-bin
  # SentencePiece tokenizer models (Llama 2, Mistral), and the reference the tests compare to
  libsentencepiece-dev python3-sentencepiece
  # reference checks, benchmarks and plots (Debian's interpreter: /usr/bin/python3)
  python3-torch python3-h5py python3-matplotlib python3-numpy hdf5-tools
  # the events files read back without TensorBoard (tests/tensorboard_events_check.py)
  python3-protobuf python3-crc32c
  # the checkpoint format's checksums recomputed by another XXH3 (tests/checkpoint_xxh3_check.py)
  python3-xxhash
  # tests: kill/timeout/ps, small file systems for disk-full tests
  procps psmisc coreutils util-linux e2fsprogs
  # scripts/gpu_bundle.sh (and its test): large libraries travel xz-compressed
  xz-utils
  # scripts/fuzz-smoke.sh: clang with libFuzzer and the sanitizer runtimes
  clang libclang-rt-14-dev
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The Slurm and munge packages try to start their daemons; inside containers
# without an init system that fails harmlessly, and the tests start their own.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
