#!/usr/bin/env bash
# Runs everything a GPU node settles about the CUDA path, with one log per step
# (docs/gpu-node.md), most wanted first, in three groups:
#   checks  the node, the tests labelled gpu, the tiny jobs on CUDA (float32 and bf16, the
#           memory features, mixture of experts, the tiny Llama)
#   perf    throughput against PyTorch, alternating rounds (GPT-2 124M, 350M, 1.5B and Llama
#           3.2 1B's shape; medians also as LOG_DIR/train_gpu.json), attention against SDPA's
#           FlashAttention-2, the largest micro-batch and sequence that fit, the per-op
#           profile, the memory-bound ops, the two streams, float32 activations
#   runs    the job templates on CUDA: GPT-2 124M (losses to compare with a CPU run), with
#           recomputation, with memory copies, and the step-time model calibrated and not
# Run from the repository root with a bundle from scripts/gpu_bundle.sh beside it:
#
#   scripts/gpu_check.sh [--skip STEPS] [--only STEPS] LOG_DIR
#       e.g. scripts/gpu_check.sh logs; scripts/gpu_check.sh --only runs logs
#       STEPS: comma-separated step or group names (the lists below); --only runs just
#       those (the node's own checks always run)
#
# Not yet timed as a whole on a GPU: the checks and one round of GPT-2 124M and 350M took about
# 5 minutes on an H100, most of it torch.compile; perf now runs three rounds a side of four
# models, so where a node is held for only minutes the script may stop before runs, and a
# second run takes them (--only runs). Stops at once when the node cannot run the bundle at all (no GPU, a library
# that does not resolve, an axonn that does not start): nothing after that would say
# anything. A step that fails or runs past its time limit is recorded and the next one runs,
# so that one failure does not hide the others. LOG_DIR/summary.tsv gets one line per step:
# name, exit status (124: past its limit), seconds, log file. Exits 1 when any step failed.
set -uo pipefail

usage="usage: scripts/gpu_check.sh [--skip STEPS] [--only STEPS] LOG_DIR (e.g. logs)"
skip="" only=""
positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --skip) skip=${2:?"--skip needs step names; $usage"}; shift 2 ;;
    --only) only=${2:?"--only needs step names; $usage"}; shift 2 ;;
    -*) echo "gpu_check.sh: unknown option '$1'; $usage" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
[ ${#positional[@]} -eq 1 ] || { echo "gpu_check.sh: $usage" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "${positional[0]}" && logs=$(cd "${positional[0]}" && pwd)
[ -f "$root/gpu-bundle/env.sh" ] ||
  { echo "gpu_check.sh: no $root/gpu-bundle/env.sh; make it on the build machine: scripts/gpu_bundle.sh build gpu-bundle" >&2; exit 2; }
# shellcheck source=/dev/null
source "$root/gpu-bundle/env.sh" >"$logs/env.log" 2>&1
summary="$logs/summary.tsv"
: >"$summary"
failed=0

group=node  # the group of the steps that follow; each section sets it
wanted() {  # NAME: whether --only/--skip let step NAME (of $group) run; the node's always run
  [ "$group" = node ] && return 0
  [ -z "$only" ] || [[ ",$only," == *",$1,"* || ",$only," == *",$group,"* ]] || return 1
  [[ ",$skip," != *",$1,"* && ",$skip," != *",$group,"* ]]
}

# step NAME LIMIT_S COMMAND...: runs COMMAND with its output in LOG_DIR/NAME.log, killed after
# LIMIT_S seconds, and records it in summary.tsv.
step() {
  local name=$1 limit=$2 rc start
  shift 2
  wanted "$name" || return 0
  start=$(date +%s)
  echo "== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%d\t%d\t%s\n' "$name" "$rc" $(($(date +%s) - start)) "$name.log" >>"$summary"
  echo "   exit $rc after $(($(date +%s) - start)) s; last lines:"
  tail -n 4 "$logs/$name.log" | sed 's/^/   | /'
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

basic_failure() {
  echo "gpu_check.sh: $*; nothing after this can run (logs in $logs)" >&2
  exit 3
}

# ---- the node: a GPU, every library resolved, an axonn that starts
step gpu 30 nvidia-smi || basic_failure "nvidia-smi sees no GPU"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv >>"$logs/gpu.log" 2>&1
for b in "$root"/gpu-bundle/bin/*; do ldd "$b"; done >"$logs/ldd.log" 2>&1
! grep -q 'not found' "$logs/ldd.log" || basic_failure "libraries not found: $(grep 'not found' "$logs/ldd.log" | sort -u | tr -s ' \t\n' ' ')"
step axonn_starts 30 axonn --help || basic_failure "axonn does not start"

# ---- checks: the tests labelled gpu (ctest's time limits), then NCCL as a user meets it
group=checks
for t in test_cuda_backend test_cuda_bf16_storage test_comm_nccl test_calibrate_gpu; do
  step "$t" 180 "$t" --gtest_brief=0 --gtest_color=no
done
step selftest_nccl 120 axonn run -n 1 selftest --backend nccl
step test_train_gpu 420 test_train_gpu --gtest_brief=0 --gtest_color=no

# The tiny jobs on CUDA, each in a folder of its own (relative checkpoint and run dirs); run/
# then holds the metrics to compare with the CPU's.
run_job() {  # NAME LIMIT_S TEMPLATE OVERRIDES...: axonn run -n 1 in LOG_DIR/jobs/NAME, as a step
  local name=$1 limit=$2 template=$3
  shift 3
  mkdir -p "$logs/jobs/$name"
  step "$name" "$limit" env -C "$logs/jobs/$name" axonn run -n 1 "$root/job_templates/$template" \
    checkpoint.dir=ckpt run.dir=run "$@"
}
run_job tiny_cuda_f32 120 tiny.toml training.device=cuda
run_job tiny_cuda_bf16 120 tiny.toml training.device=cuda training.dtype=bfloat16
run_job tiny_cuda_memory_features 120 tiny.toml training.device=cuda \
  training.dtype=bfloat16 training.recompute=block training.shard_optimizer=true
# Mixture of experts on CUDA (one GPU: every expert local, E_p = 1): dropless and with a
# capacity, bf16, so the router, the experts' grouped GEMMs and the gradients' scatter run.
run_job tiny_cuda_moe 120 tiny.toml training.device=cuda model.experts=8 model.top_k=2
run_job tiny_cuda_moe_capacity_bf16 120 tiny.toml training.device=cuda training.dtype=bfloat16 \
  model.experts=8 model.top_k=2 model.capacity_factor=1.0
# The Llama family's kernels on CUDA (RMSNorm, SwiGLU, RoPE, grouped-query attention), bf16.
run_job llama_tiny_cuda_bf16 120 llama-tiny.toml training.device=cuda training.dtype=bfloat16

# ---- perf: throughput against PyTorch, three alternating rounds a side, medians (also as
# train_gpu.json, rewritten after each model: what finished survives a time limit); the
# recomputation as the chooser picks it for this GPU. Then attention against SDPA, what fits,
# and where the step's time goes.
group=perf
step bench_train_gpu 540 bench_train_gpu --model 124m,350m,1.5b,llama-1b --rounds 3 --gemm-candidates 16 \
  --json "$logs/train_gpu.json"
step attention 120 bench_ops_gpu --attention
step fit 300 bench_train_gpu --fit
step profile 180 bench_train_gpu --profile --steps 3
step ops 60 bench_ops_gpu
step stream_overlap 60 bench_stream_overlap_gpu
step bench_train_gpu_f32 180 bench_train_gpu --model 350m --no-torch --float32-activations --rounds 1

# ---- runs: GPT-2 124M's template on CUDA, each in a folder of its own
group=runs
# The CPU comparison runs (same overrides, training.device=cpu) are made on the build machine.
run_job gpt2_124m_short_f32 180 gpt2-124m.toml training.device=cuda \
  training.dtype=float32 training.global_batch=8 training.micro_batch=4 training.steps=10 training.warmup_steps=2 run.log_interval=1
run_job gpt2_124m 240 gpt2-124m.toml training.device=cuda run.log_interval=1
run_job gpt2_124m_recompute 240 gpt2-124m.toml training.device=cuda \
  training.recompute=block run.log_interval=1
# Memory copies on a GPU: the run measures their pause (1.5 GB from the device into host
# buffers) and the slowdown of the steps beside their writing, and logs the interval that keeps
# them within 2% of training time (compare its step times with gpt2_124m's). Two steps of
# copies take 3 GB: /dev/shm when it has room (a container's is often 64 MB), else the log dir.
memory_dir=/dev/shm
[ "$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -n 1)" -gt $((4 << 30)) ] 2>/dev/null ||
  memory_dir="$logs/jobs/memory-copies"
mkdir -p "$memory_dir"
run_job gpt2_124m_memory_copies 240 gpt2-124m.toml training.device=cuda \
  checkpoint.memory_interval=auto checkpoint.memory_dir="$memory_dir" run.log_interval=1

# The step-time model on this GPU: calibrate without a job (square GEMMs: what the GPU
# reaches) and for the GPT-2 124M template (its GEMMs, attention and elementwise rate on one
# rank), then the template with the calibrated site and with the shipped one; each
# summary.json has the measured and predicted step (step_time_ratio).
mkdir -p "$logs/jobs/calibrated_gpt2_124m" "$logs/jobs/calibrate_square"
step calibrate_square 120 env -C "$logs/jobs/calibrate_square" axonn run -n 1 calibrate \
  --site "$root/site_configs/dgx-h100.toml" --output site.toml
step calibrate_gpt2_124m 180 env -C "$logs/jobs/calibrated_gpt2_124m" axonn run -n 1 calibrate \
  --site "$root/site_configs/dgx-h100.toml" --job "$root/job_templates/gpt2-124m.toml" --output site.toml
run_job calibrated_gpt2_124m 240 gpt2-124m.toml training.device=cuda --site "$logs/jobs/calibrated_gpt2_124m/site.toml" \
  run.log_interval=1
run_job uncalibrated_gpt2_124m 240 gpt2-124m.toml training.device=cuda --site "$root/site_configs/dgx-h100.toml" \
  run.log_interval=1

echo "gpu_check.sh: steps in $summary:"
column -t "$summary" 2>/dev/null || cat "$summary"
exit "$failed"
