#!/usr/bin/env bash
# Collects the GPU tests and benchmarks of a CUDA build into one folder that can be copied to
# a GPU node which lacks the build's libraries (docs/gpu-node.md): such a node has the NVIDIA
# driver, CUDA, cuBLAS(Lt) and NCCL (its own /usr/local/cuda or PyTorch's pip packages) but
# not the Debian libraries axonn links, and libcublasLt (500 MB) and libnccl (200 MB) are
# better taken from the node than copied.
#
#   scripts/gpu_bundle.sh [--max-size MIB] BUILD_DIR OUT_DIR
#       e.g. scripts/gpu_bundle.sh build gpu-bundle
#       --max-size MIB  fail when the finished bundle is larger than MIB mebibytes (the ctest
#                       test gpu_bundle_fits_max_size passes 60, so that growth is noticed);
#                       without it any size is accepted
#
# OUT_DIR (emptied first) gets:
#   bin/     axonn, the tests labelled gpu in tests/CMakeLists.txt, bench_train_gpu, bench_ops_gpu,
#            bench_stream_overlap_gpu
#            (stripped copies: no debug sections or symbol tables)
#   lib/     every shared library they and the PMIx components need, except glibc's and
#            the GPU node's (libcuda, libcudart, libcublas, libcublasLt, libnccl), under the
#            name they are linked by (symbolic links resolved: links travel as links);
#            those over 4 MiB as NAME.xz, which env.sh unpacks under $TMPDIR
#   lib/pmix PMIx's MCA components, which libpmix dlopens at run time
#   share/pmix PMIx's help texts
#   env.sh   sourced on the GPU node: library path, PMIx's install directories,
#            AXONN_BINARY_DIR / AXONN_SOURCE_DIR for the tests (tests/process_helpers.hpp),
#            AXONN_COMMIT (the source tree's commit, for the benchmarks' JSON)
# Then checks that every library a bundled file needs resolves inside OUT_DIR/lib (or is
# glibc's or the GPU node's) with only OUT_DIR/lib on the library path, and, with
# --max-size, that the bundle is no larger than the limit. Fails, naming what is wrong,
# otherwise.
set -euo pipefail

die() {
  echo "gpu_bundle.sh: $*" >&2
  exit 1
}

usage="usage: scripts/gpu_bundle.sh [--max-size MIB] BUILD_DIR OUT_DIR (e.g. build gpu-bundle)"
max_mib=""  # no limit
positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --max-size)
      [ $# -ge 2 ] || die "--max-size needs a size in MiB (e.g. --max-size 60); $usage"
      max_mib=$2
      shift 2
      ;;
    --max-size=*)
      max_mib=${1#--max-size=}
      shift
      ;;
    --) shift; positional+=("$@"); break ;;
    -*) die "unknown option '$1'; $usage" ;;
    *) positional+=("$1"); shift ;;
  esac
done
if [ -n "$max_mib" ] && ! [[ "$max_mib" =~ ^[1-9][0-9]{0,6}$ ]]; then
  die "--max-size '$max_mib' is not a whole number of MiB from 1 to 9999999; $usage"
fi
[ ${#positional[@]} -eq 2 ] || die "$usage"
build=$(cd "${positional[0]}" 2>/dev/null && pwd) ||
  die "build directory '${positional[0]}' does not exist; build first (cmake --build ${positional[0]})"
out=${positional[1]}
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The libraries the GPU node provides, and glibc's (always the node's own: a copied libc
# does not match that node's dynamic loader).
gpu_node_libs='^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-[a-z-]+)\.so'
glibc_libs='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnss_[a-z]+)\.so'

# ---- binaries
[ -f "$source_dir/tests/CMakeLists.txt" ] || die "$source_dir is not the axonn source tree (no tests/CMakeLists.txt)"
gpu_tests=$(sed -n 's/^ *axonn_test(\([a-z0-9_]*\) LABEL gpu .*/\1/p' "$source_dir/tests/CMakeLists.txt")
[ -n "$gpu_tests" ] || die "no test labelled gpu in $source_dir/tests/CMakeLists.txt (axonn_test(NAME LABEL gpu ...))"
binaries=("$build/bin/axonn" "$build/bench/bench_train_gpu" "$build/bench/bench_ops_gpu"
  "$build/bench/bench_stream_overlap_gpu")
for t in $gpu_tests; do binaries+=("$build/tests/$t"); done
for b in "${binaries[@]}"; do
  [ -x "$b" ] || die "$b is missing; build it: cmake --build $build --target $(basename "$b")"
done

# Emptied first, so only a folder this script made (or an empty one) may be named.
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -f "$out/env.sh" ]; then
  die "$out is not empty and is no earlier bundle (no env.sh); name a new folder, e.g. gpu-bundle"
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/pmix" "$out/share/pmix"
out=$(cd "$out" && pwd)
for b in "${binaries[@]}"; do strip --strip-all -o "$out/bin/$(basename "$b")" "$b"; done

# ---- PMIx's components and help texts, found beside the libpmix the build links
libpmix=$(ldd "$build/bin/axonn" | awk '$1 == "libpmix.so.2" { print $3 }')
[ -n "$libpmix" ] || die "$build/bin/axonn does not link libpmix.so.2 (ldd); is this an axonn build?"
pmix_prefix=$(dirname "$(dirname "$(readlink -f "$libpmix")")")  # /usr/lib/x86_64-linux-gnu/pmix2
compgen -G "$pmix_prefix/lib/pmix/*.so" >/dev/null ||
  die "no PMIx components in $pmix_prefix/lib/pmix (libpmix is $libpmix); install libpmix2"
cp "$pmix_prefix"/lib/pmix/*.so "$out/lib/pmix/"
cp "$pmix_prefix"/share/pmix/help-*.txt "$out/share/pmix/"

# ---- libraries: what ldd resolves on this machine for each binary and component
copy_needed() {  # FILE: copies each library FILE needs that is neither glibc's nor the GPU node's
  local name arrow path rest
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    [[ "$name" =~ $glibc_libs || "$name" =~ $gpu_node_libs ]] && continue
    [ "$path" != "not" ] || die "$1 needs $name, which is not found on this machine"
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$1")
}
for f in "$out"/bin/* "$out"/lib/pmix/*.so; do copy_needed "$f"; done

# ---- env.sh
cat >"$out/env.sh" <<'EOF'
# Sourced (bash) on the GPU node, from anywhere: `source gpu-bundle/env.sh`.
# Made by scripts/gpu_bundle.sh; see docs/gpu-node.md.
_axonn_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The libraries that travel xz-compressed (gpu_bundle.sh), unpacked with python3's lzma (the
# xz command may be missing) outside the bundle, so that the bundle itself stays as it was
# copied; again whenever the bundle's copy is newer.
_axonn_unpacked="${TMPDIR:-/tmp}/axonn-bundle-lib-$(id -u)"
mkdir -p "$_axonn_unpacked"
for _axonn_xz in "$_axonn_bundle"/lib/*.xz; do
  _axonn_lib="$_axonn_unpacked/$(basename "${_axonn_xz%.xz}")"
  [ -e "$_axonn_xz" ] && { [ ! -e "$_axonn_lib" ] || [ "$_axonn_xz" -nt "$_axonn_lib" ]; } || continue
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$_axonn_xz" "$_axonn_lib.part" && mv "$_axonn_lib.part" "$_axonn_lib" ||
    echo "env.sh: cannot unpack $_axonn_xz into $_axonn_unpacked with python3 (lzma)" >&2
done
# PyTorch's pip packages (nvidia-cublas, nvidia-nccl-cu13, nvidia-cuda-runtime, ...) keep
# their libraries in <site-packages>/nvidia/<package>/lib or nvidia/cu13/lib: every such
# folder under the nvidia namespace package of the python3 on the PATH.
_axonn_nvidia=$(python3 -c '
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
found = []
for root in nvidia.__path__:
    for path, dirs, files in os.walk(root):
        if path[len(root):].count(os.sep) > 2:
            dirs[:] = []
        elif os.path.basename(path) == "lib" and any(".so" in f for f in files):
            found.append(path)
print(":".join(sorted(found)))
' 2>/dev/null || true)
# python3 subprocesses (bench_train_gpu's PyTorch side) get the library path as it was, so
# that PyTorch does not load this bundle's copies of libraries it has its own of.
export AXONN_PYTHON_LD_LIBRARY_PATH="${AXONN_PYTHON_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}"
export LD_LIBRARY_PATH="$_axonn_bundle/lib:$_axonn_unpacked${_axonn_nvidia:+:$_axonn_nvidia}:/usr/local/cuda/lib64${AXONN_PYTHON_LD_LIBRARY_PATH:+:$AXONN_PYTHON_LD_LIBRARY_PATH}"
# PMIx (4.x) finds its MCA components and help texts through its install directories,
# compiled in as Debian's paths; these environment variables replace them.
export PMIX_MCA_mca_base_component_path="$_axonn_bundle/lib/pmix"
export PMIX_PREFIX="$_axonn_bundle"
export PMIX_PKGLIBDIR="$_axonn_bundle/lib/pmix"
export PMIX_PKGDATADIR="$_axonn_bundle/share/pmix"
export PMIX_SYSCONFDIR="$_axonn_bundle/share"
# The tests run $AXONN_BINARY_DIR/bin/axonn and make their scratch folders there; the
# source tree (job templates, bench/train_gpu_torch.py) is the folder holding the bundle.
export AXONN_BINARY_DIR="$_axonn_bundle"
if [ -f "$_axonn_bundle/../bench/train_gpu_torch.py" ]; then
  AXONN_SOURCE_DIR=$(cd "$_axonn_bundle/.." && pwd)
  export AXONN_SOURCE_DIR
else
  echo "env.sh: $_axonn_bundle/.. is not the axonn source tree; set AXONN_SOURCE_DIR" >&2
fi
export PATH="$_axonn_bundle/bin:$PATH"
echo "env.sh: bundle $_axonn_bundle; CUDA libraries from ${_axonn_nvidia:-no pip nvidia packages}, /usr/local/cuda/lib64"
unset _axonn_bundle _axonn_nvidia _axonn_xz _axonn_lib _axonn_unpacked
EOF
# The commit the bundle was made from, for the results the benchmarks write (bench_train_gpu
# --json): `git describe --always --dirty` of the source tree.
commit=$(git -C "$source_dir" describe --always --dirty 2>/dev/null || echo unknown)
printf 'export AXONN_COMMIT=%q\n' "$commit" >>"$out/env.sh"

# ---- checks: with only the bundle on the library path, every library that is neither
# glibc's nor the GPU node's must resolve inside it (the system's folders come after
# LD_LIBRARY_PATH, so a library found there is one the bundle lacks).
bad=0
for f in "$out"/bin/* "$out"/lib/*.so* "$out"/lib/pmix/*.so; do
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    [[ "$name" =~ $glibc_libs || "$name" =~ $gpu_node_libs ]] && continue
    case "$path" in
      "$out"/lib/*) ;;
      *) echo "gpu_bundle.sh: $f: $name resolves to $path, outside the bundle" >&2; bad=1 ;;
    esac
  done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$out/lib" ldd "$f")
done
[ "$bad" -eq 0 ] || die "libraries missing from $out/lib (above)"

# ---- size: libraries over 4 MiB (OpenBLAS, 36 MiB with its kernels for every x86 CPU; libcrypto)
# travel xz-compressed, and env.sh unpacks them on the GPU node.
for f in "$out"/lib/*.so*; do
  [ "$(stat -c %s "$f")" -le $((4 * 1024 * 1024)) ] || xz -9 -T2 "$f"
done
bytes=$(du -sb "$out" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if [ -n "$max_mib" ] && [ "$bytes" -gt $((max_mib * 1024 * 1024)) ]; then
  die "$out is $mib MiB, larger than --max-size $max_mib MiB; largest files: $(find "$out" -type f -printf '%s %p\n' | sort -n | tail -3 | awk '{ printf "%s (%.1f MiB) ", $2, $1 / 1048576 }')"
fi
echo "gpu_bundle.sh: $out: $mib MiB${max_mib:+ (--max-size $max_mib)}; $(ls "$out/bin" | wc -l) binaries ($(ls "$out/bin" | tr '\n' ' ')), $(ls "$out/lib" | grep -c '\.so') libraries ($(cd "$out/lib" && ls -- *.xz | tr '\n' ' ')compressed), $(ls "$out/lib/pmix" | wc -l) PMIx components"
