#include "trainer/cuda/gemm.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "trainer/cuda/bias.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/cublaslt_library.hpp"
#include "trainer/cuda/elementwise.hpp"
#include "trainer/cuda/gelu.hpp"
#include "trainer/cuda/gemm_probe.hpp"

namespace axonn::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxCandidates = 16;
constexpr int kTimedRuns = 3;  // per candidate or epilogue form, after one untimed run

cudaDataType_t cuda_type(ElementType type) { return type == ElementType::bfloat16 ? CUDA_R_16BF : CUDA_R_32F; }

// bf16 inputs multiply on bf16 tensor cores at float32 accumulation whatever the GemmMath;
// the math says how float32 inputs are multiplied.
cublasComputeType_t compute_type(GemmMath math, ElementType inputs) {
  if (inputs == ElementType::bfloat16) return CUBLAS_COMPUTE_32F;
  switch (math) {
    case GemmMath::bf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmMath::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmMath::fp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

cublasLtEpilogue_t cublaslt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu_aux_bias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::bias_grad_b:  // our B is cuBLASLt's A
      return CUBLASLT_EPILOGUE_BGRADA;
    case Epilogue::none:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The epilogue's vectors on the descriptor. The heuristic reads the aux pointer's value to
// know its alignment, so a plan sets them before choosing its algorithm and every run sets
// them again (the plan serves every call of its shape).
void set_epilogue_pointers(const char* op, cublasLtMatmulDesc_t desc, const GemmCall& call) {
  // The bias vector: read by bias and gelu_aux_bias, written by bias_grad_b.
  const void* bias = call.bias ? call.bias.raw() : static_cast<const void*>(call.bias_grad);
  if (bias != nullptr)
    AXONN_CUDA_OP_CHECK(
        op, cublasLt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (call.aux) {
    void* aux = call.aux.raw();
    AXONN_CUDA_OP_CHECK(
        op, cublasLt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    const int64_t ld = call.ldc;
    AXONN_CUDA_OP_CHECK(op,
                        cublasLt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
}

// Whether cuBLASLt can apply the call's epilogue at all: batch 1, the bias vector read 16
// bytes at a time, the aux matrix's row stride a multiple of 8 elements (cuBLASLt's rules).
bool epilogue_possible(const GemmCall& call) {
  if (call.epilogue == Epilogue::none) return true;
  if (call.batch != 1) return false;
  if (call.bias && reinterpret_cast<uintptr_t>(call.bias.raw()) % 16 != 0) return false;
  if (call.bias_grad != nullptr && reinterpret_cast<uintptr_t>(call.bias_grad) % 16 != 0) return false;
  return !call.aux || call.ldc % 8 == 0;
}

// The element type of the bias vector where it is not the output's (cuBLASLt's default): a
// float32 bias gradient beside a bf16 output.
void set_bias_type(const char* op, cublasLtMatmulDesc_t desc, const GemmCall& call) {
  if (!call.bias && call.bias_grad == nullptr) return;
  const ElementType bias = call.bias ? call.bias.type() : ElementType::float32;
  if (bias == call.c.type()) return;
  const int32_t type = cuda_type(bias);
  AXONN_CUDA_OP_CHECK(
      op, cublasLt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
}

// GemmCall's type rules, which are cuBLASLt's: a call outside them is the caller's error.
void require_types(const char* op, const GemmCall& call) {
  auto name = [](ElementType t) { return std::string(element_type_name(t)); };
  if (call.a.type() != call.b.type())
    fail(op, "A is " + name(call.a.type()) + " and B " + name(call.b.type()) +
                 "; cuBLASLt multiplies operands of one type: pass the weights in the activations' type");
  if (call.a.type() == ElementType::float32 && call.c.type() != ElementType::float32)
    fail(op, "float32 operands with a " + name(call.c.type()) +
                 " result; cuBLASLt writes float32 products in float32 only: pass C as float32");
  if (call.bias && call.bias.type() != ElementType::float32 && call.bias.type() != call.c.type())
    fail(op, "a " + name(call.bias.type()) + " bias beside a " + name(call.c.type()) +
                 " output; pass the bias in float32 or in the output's type");
  if (call.aux && call.aux.type() != call.c.type())
    fail(op, "the GELU input is " + name(call.aux.type()) + " and the output " + name(call.c.type()) +
                 "; store both in one type");
}

// The largest power of two, at most 256, dividing the byte address of every matrix of the
// batch. cuBLASLt's heuristic assumes 256-byte aligned matrices unless told otherwise, and a
// view (a column block, a head inside packed qkv) is often only 2- or 4-byte aligned.
int64_t alignment(const void* p, int64_t stride, int64_t batch, size_t element_bytes) {
  auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  if (batch > 1) bits |= static_cast<uint64_t>(stride) * element_bytes;
  int64_t align = 256;
  while (align > 1 && bits % static_cast<uint64_t>(align) != 0) align /= 2;
  return align;
}

std::string describe(const GemmCall& call) {
  auto t = [](Transpose x) { return x == Transpose::yes ? "T" : "N"; };
  std::string s = std::string("ta=") + t(call.ta) + " tb=" + t(call.tb) + " m=" + std::to_string(call.m) +
                  " n=" + std::to_string(call.n) + " k=" + std::to_string(call.k) + " lda=" + std::to_string(call.lda) +
                  " ldb=" + std::to_string(call.ldb) + " ldc=" + std::to_string(call.ldc);
  if (call.batch > 1) s += " batch=" + std::to_string(call.batch);
  s += std::string(" ") + element_type_name(call.a.type()) + "->" + element_type_name(call.c.type());
  return s;
}

void set_batch(const char* op, cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
  if (batch <= 1) return;
  const auto count = static_cast<int32_t>(batch);
  AXONN_CUDA_OP_CHECK(
      op, cublasLt().MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  AXONN_CUDA_OP_CHECK(op, cublasLt().MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &stride, sizeof(stride)));
}

void set_alignment(const char* op, cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   int64_t bytes) {
  const auto value = static_cast<uint32_t>(bytes);
  AXONN_CUDA_OP_CHECK(op, cublasLt().MatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

}  // namespace

size_t Gemm::KeyHash::operator()(const Key& key) const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ull + (h >> 29);
  return static_cast<size_t>(h);
}

Gemm::Gemm(GemmMath math, int candidates) : math_(math), candidates_(candidates) {
  const char* op = "make_cuda_backend";
  if (candidates < 1 || candidates > kMaxCandidates)
    fail(op, "gemm_candidates = " + std::to_string(candidates) + " is outside 1 .. " + std::to_string(kMaxCandidates) +
                 "; 1 takes the cuBLASLt heuristic's first algorithm untimed");
  AXONN_CUDA_OP_CHECK(op, cublasLt().Create(&handle_));
  const cudaError_t e = cudaMalloc(&workspace_, kWorkspaceBytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cublasLt().Destroy(handle_);
    fail(op,
         "cudaMalloc of the " + std::to_string(kWorkspaceBytes) + "-byte cuBLASLt workspace failed: " + error_text(e));
  }
  workspace_bytes_ = kWorkspaceBytes;
}

// Releases the plan's descriptors and leaves it empty: a shape whose epilogue is run by the
// caller. Never throws.
void Gemm::drop_plan(Plan& plan) {
  if (plan.c != nullptr) (void)cublasLt().MatrixLayoutDestroy(plan.c);
  if (plan.b != nullptr) (void)cublasLt().MatrixLayoutDestroy(plan.b);
  if (plan.a != nullptr) (void)cublasLt().MatrixLayoutDestroy(plan.a);
  if (plan.desc != nullptr) (void)cublasLt().MatmulDescDestroy(plan.desc);
  plan = Plan{};
}

Gemm::~Gemm() {
  // Never throws; the backend's destructor has waited for its stream already.
  for (auto& [key, plan] : plans_) drop_plan(plan);
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  if (handle_ != nullptr) (void)cublasLt().Destroy(handle_);
}

// Builds the plan for `compute`; false (plan released, `why` set) when the heuristic finds
// no algorithm. A failing cuBLASLt call throws, after releasing what was created.
bool Gemm::try_plan(const Context& ctx, const char* op, const GemmCall& call, const Key& key,
                    cublasComputeType_t compute, Plan& plan, cublasStatus_t& why) {
  cublasLtMatmulPreference_t pref = nullptr;
  auto release = [&] {
    if (pref != nullptr) (void)cublasLt().MatmulPreferenceDestroy(pref);
    drop_plan(plan);
  };
  try {
    const bool ta = call.ta == Transpose::yes, tb = call.tb == Transpose::yes;
    const auto m = static_cast<uint64_t>(call.m), n = static_cast<uint64_t>(call.n), k = static_cast<uint64_t>(call.k);
    AXONN_CUDA_OP_CHECK(op, cublasLt().MatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
    const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
    AXONN_CUDA_OP_CHECK(op,
                        cublasLt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    AXONN_CUDA_OP_CHECK(op,
                        cublasLt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    if (call.epilogue != Epilogue::none) {
      const cublasLtEpilogue_t epilogue = cublaslt_epilogue(call.epilogue);
      AXONN_CUDA_OP_CHECK(
          op, cublasLt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
      set_epilogue_pointers(op, plan.desc, call);
      set_bias_type(op, plan.desc, call);
    }
    // Column-major (rows, cols) as stored: our row-major B is (k, n), or (n, k) transposed;
    // our A is (m, k), or (k, m) transposed; our C is (m, n).
    const cudaDataType_t in = cuda_type(call.a.type()), out = cuda_type(call.c.type());
    AXONN_CUDA_OP_CHECK(op, cublasLt().MatrixLayoutCreate(&plan.a, in, tb ? k : n, tb ? n : k, call.ldb));
    AXONN_CUDA_OP_CHECK(op, cublasLt().MatrixLayoutCreate(&plan.b, in, ta ? m : k, ta ? k : m, call.lda));
    AXONN_CUDA_OP_CHECK(op, cublasLt().MatrixLayoutCreate(&plan.c, out, n, m, call.ldc));
    set_batch(op, plan.a, call.batch, call.stride_b);
    set_batch(op, plan.b, call.batch, call.stride_a);
    set_batch(op, plan.c, call.batch, call.stride_c);

    AXONN_CUDA_OP_CHECK(op, cublasLt().MatmulPreferenceCreate(&pref));
    const uint64_t workspace = workspace_bytes_;
    AXONN_CUDA_OP_CHECK(op, cublasLt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                    &workspace, sizeof(workspace)));
    set_alignment(op, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key[12]);  // our B
    set_alignment(op, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key[13]);  // our A
    set_alignment(op, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key[14]);
    set_alignment(op, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key[14]);

    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates_));
    int found = 0;
    const cublasStatus_t status = cublasLt().MatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                                                    pref, candidates_, results.data(), &found);
    (void)cublasLt().MatmulPreferenceDestroy(pref);
    pref = nullptr;
    if (status != CUBLAS_STATUS_SUCCESS || found == 0 || results[0].state != CUBLAS_STATUS_SUCCESS) {
      why = status != CUBLAS_STATUS_SUCCESS ? status : found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : results[0].state;
      release();
      return false;
    }
    plan.algo = found > 1 ? fastest(ctx, op, call, plan, results.data(), found) : results[0].algo;
    return true;
  } catch (...) {
    release();
    throw;
  }
}

cublasStatus_t Gemm::matmul(const Context& ctx, const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                            const GemmCall& call) {
  const float alpha = call.alpha, beta = call.beta;  // host scalars, read during the call
  return cublasLt().Matmul(handle_, plan.desc, &alpha, call.b.raw(), plan.a, call.a.raw(), plan.b, &beta, call.c.raw(),
                           plan.c, call.c.raw(), plan.c, &algo, workspace_, workspace_bytes_, ctx.stream);
}

// Each candidate runs once untimed, then kTimedRuns times; one cuBLASLt refuses to run is
// skipped. Without the memory to time in, the heuristic's first algorithm is kept.
cublasLtMatmulAlgo_t Gemm::fastest(const Context& ctx, const char* op, const GemmCall& call, const Plan& plan,
                                   const cublasLtMatmulHeuristicResult_t* results, int found) {
  GemmProbe probe(ctx, op, call);
  if (!probe.ok()) return results[0].algo;
  StreamStopwatch stopwatch(ctx, op);
  set_epilogue_pointers(op, plan.desc, probe.call());
  cublasLtMatmulAlgo_t best = results[0].algo;
  float best_ms = std::numeric_limits<float>::infinity();
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const float ms = stopwatch.milliseconds(
        kTimedRuns, [&] { return matmul(ctx, plan, results[i].algo, probe.call()) == CUBLAS_STATUS_SUCCESS; });
    if (ms < best_ms) {
      best_ms = ms;
      best = results[i].algo;
    }
  }
  probe.release(op);
  return best;
}

bool Gemm::kernels_faster(const Context& ctx, const char* op, const GemmCall& call, Plan& plan,
                          const EpilogueKernels& kernels) {
  if (plan.form != Plan::Form::untimed) return plan.form == Plan::Form::kernels;
  plan.form = Plan::Form::fused;  // unless the kernels prove faster below, or there is no memory to time in
  Scratch kernels_scratch;        // declared before the probe, so freed after the probe drained the stream
  GemmProbe probe(ctx, op, call);
  if (!probe.ok()) return false;
  Context kernels_ctx = ctx;
  kernels_ctx.scratch = &kernels_scratch;
  StreamStopwatch stopwatch(ctx, op);
  set_epilogue_pointers(op, plan.desc, probe.call());
  const float fused_ms = stopwatch.milliseconds(
      kTimedRuns, [&] { return matmul(ctx, plan, plan.algo, probe.call()) == CUBLAS_STATUS_SUCCESS; });
  const float kernels_ms = stopwatch.milliseconds(kTimedRuns, [&] {
    kernels(kernels_ctx, probe.call());
    return true;
  });
  probe.release(op);
  if (kernels_ms < fused_ms) plan.form = Plan::Form::kernels;
  return plan.form == Plan::Form::kernels;
}

Gemm::Plan* Gemm::plan_for(const Context& ctx, const char* op, const GemmCall& call) {
  const Key key = {call.ta == Transpose::yes,
                   call.tb == Transpose::yes,
                   call.m,
                   call.n,
                   call.k,
                   call.lda,
                   call.ldb,
                   call.ldc,
                   call.batch,
                   call.stride_a,
                   call.stride_b,
                   call.stride_c,
                   alignment(call.b.raw(), call.stride_b, call.batch, call.b.element_bytes()),
                   alignment(call.a.raw(), call.stride_a, call.batch, call.a.element_bytes()),
                   alignment(call.c.raw(), call.stride_c, call.batch, call.c.element_bytes()),
                   alignment(call.aux.raw(), 0, 1, call.aux.element_bytes()),
                   static_cast<int64_t>(call.epilogue),
                   static_cast<int64_t>(call.a.type()),
                   static_cast<int64_t>(call.c.type())};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.desc != nullptr ? &it->second : nullptr;
  Plan plan;
  cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
  const cublasComputeType_t compute = compute_type(math_, call.a.type());
  bool ok = try_plan(ctx, op, call, key, compute, plan, why);
  // An epilogue the GEMM cannot fuse is run by the caller, at the same math: remember that.
  if (!ok && call.epilogue != Epilogue::none) {
    plans_.emplace(key, Plan{});
    return nullptr;
  }
  // The tensor-core types may have no kernel for an odd alignment or stride; exact float32
  // always has one. Slower, never wrong.
  if (!ok && compute != CUBLAS_COMPUTE_32F) ok = try_plan(ctx, op, call, key, CUBLAS_COMPUTE_32F, plan, why);
  if (!ok)
    fail(op, "cuBLASLt found no algorithm for " + describe(call) + " (math " + gemm_math_name(math_) + ", alignments " +
                 std::to_string(key[13]) + "/" + std::to_string(key[12]) + "/" + std::to_string(key[14]) +
                 " bytes): " + error_text(why));
  return &plans_.emplace(key, plan).first->second;
}

bool Gemm::run(const Context& ctx, const char* op, const GemmCall& call, const EpilogueKernels& kernels) {
  if (call.batch > INT32_MAX) fail(op, "batch = " + std::to_string(call.batch) + " exceeds cuBLASLt's 32-bit count");
  require_types(op, call);
  if (!epilogue_possible(call)) return false;
  Plan* plan = plan_for(ctx, op, call);
  if (plan == nullptr) return false;
  if (kernels && candidates_ > 1 && kernels_faster(ctx, op, call, *plan, kernels)) return false;
  set_epilogue_pointers(op, plan->desc, call);
  const cublasStatus_t status = matmul(ctx, *plan, plan->algo, call);
  // An epilogue's type combination (a float32 bias beside a bf16 output) can pass the
  // heuristic and still be refused here, before anything is queued: the caller then runs the
  // epilogue's kernels, as for an epilogue with no algorithm, and so does every later call.
  if (status != CUBLAS_STATUS_SUCCESS && call.epilogue != Epilogue::none && !plan->ran) {
    drop_plan(*plan);
    return false;
  }
  check_call(status, op, "cublasLtMatmul");
  plan->ran = true;
  check_launch(ctx, op);
  return true;
}

void gemm(const Context& ctx, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, ConstActPtr a,
          int64_t lda, ConstActPtr b, int64_t ldb, float beta, ActPtr c, int64_t ldc) {
  require_nonnegative("gemm", "m", m);
  require_nonnegative("gemm", "n", n);
  require_nonnegative("gemm", "k", k);
  op_checks::require_gemm_ld("lda", lda, ta == Transpose::no ? k : m);
  op_checks::require_gemm_ld("ldb", ldb, tb == Transpose::no ? n : k);
  op_checks::require_gemm_ld("ldc", ldc, n);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // the product is empty: C = beta·C, and beta = 0 must not read C
    scale_matrix(ctx, "gemm", c, ldc, m, n, beta);
    return;
  }
  const GemmCall call{
      .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha, .a = a, .lda = lda, .b = b, .ldb = ldb,
      .beta = beta, .c = c, .ldc = ldc};
  ctx.gemm->run(ctx, "gemm", call);
}

// The bias (n floats) as a bias epilogue reads it beside an output of type `out`: a bf16
// output's rounded to bf16 in scratch, as cuBLASLt's bias epilogue with a float32 bias beside
// a bf16 output ran the GEMM at half its plain rate (bench_ops_gpu, GPT-2 350M's shapes on an
// H200); bf16 autocast rounds a bias the same way.
ConstActPtr epilogue_bias(const Context& ctx, const char* op, const float* bias, ElementType out, int64_t n) {
  if (out != ElementType::bfloat16 || bias == nullptr) return bias;
  const ActPtr rounded(ctx.scratch->get(ctx.stream, static_cast<size_t>(n) * element_size(out), op), out);
  convert(ctx, rounded, bias, n);
  return rounded;
}

void linear_forward(const Context& ctx, ActPtr y, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m,
                    int64_t n, int64_t k) {
  const char* op = "linear_forward";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "n", n);
  require_nonnegative(op, "k", k);
  if (m == 0 || n == 0) return;
  const auto kernels = [&](const Context& c, const GemmCall& out) {
    gemm(c, Transpose::no, Transpose::no, m, n, k, 1.0f, x, k, w, n, 0.0f, out.c, n);
    bias_forward(c, out.c, bias, m, n, n);
  };
  const GemmCall call{.m = m, .n = n, .k = k, .a = x, .lda = k, .b = w, .ldb = n, .c = y, .ldc = n,
                      .epilogue = Epilogue::bias, .bias = epilogue_bias(ctx, op, bias, y.type(), n)};
  if (k > 0 && ctx.gemm->run(ctx, op, call, kernels)) return;
  kernels(ctx, call);
}

void linear_gelu_forward(const Context& ctx, ActPtr pre, ActPtr out, ConstActPtr x, ConstActPtr w, const float* bias,
                         int64_t m, int64_t n, int64_t k) {
  const char* op = "linear_gelu_forward";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "n", n);
  require_nonnegative(op, "k", k);
  if (m == 0 || n == 0) return;
  const auto kernels = [&](const Context& c, const GemmCall& outputs) {
    linear_forward(c, outputs.aux, x, w, bias, m, n, k);
    gelu_forward(c, outputs.c, outputs.aux, m * n);
  };
  const GemmCall call{.m = m, .n = n, .k = k, .a = x, .lda = k, .b = w, .ldb = n, .c = out, .ldc = n,
                      .epilogue = Epilogue::gelu_aux_bias, .bias = epilogue_bias(ctx, op, bias, out.type(), n), .aux = pre};
  if (k > 0 && ctx.gemm->run(ctx, op, call, kernels)) return;
  kernels(ctx, call);
}

void linear_input_grad_gelu(const Context& ctx, ActPtr dpre, ConstActPtr dy, ConstActPtr w, ConstActPtr pre,
                            int64_t m, int64_t n, int64_t k) {
  const char* op = "linear_input_grad_gelu";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "n", n);
  require_nonnegative(op, "k", k);
  if (m == 0 || k == 0) return;
  const auto kernels = [&](const Context& c, const GemmCall& out) {
    gemm(c, Transpose::no, Transpose::yes, m, k, n, 1.0f, dy, n, w, n, 0.0f, out.c, k);
    gelu_backward(c, out.c, pre, out.c, m * k);
  };
  // dpre (m, k) = dY (m, n)·W^T: the GEMM's own (m, n, k) are (m, k, n). DGELU only reads aux;
  // the field is non-const because GELU_AUX_BIAS writes it.
  const ActPtr aux(const_cast<void*>(pre.raw()), pre.type());
  const GemmCall call{.tb = Transpose::yes, .m = m, .n = k, .k = n, .a = dy, .lda = n, .b = w, .ldb = n, .c = dpre,
                      .ldc = k, .epilogue = Epilogue::dgelu, .aux = aux};
  if (n > 0 && ctx.gemm->run(ctx, op, call, kernels)) return;
  kernels(ctx, call);
}

void linear_weight_grad(const Context& ctx, float* dw, float beta, float* dbias, ConstActPtr x, ConstActPtr dy,
                        int64_t m, int64_t n, int64_t k) {
  const char* op = "linear_weight_grad";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "n", n);
  require_nonnegative(op, "k", k);
  if (n == 0) return;
  // dW (k, n) = X^T (k, m)·dY (m, n): the GEMM's (m, n, k) are (k, n, m), and dY is its B.
  const auto kernels = [&](const Context& c, const GemmCall& out) {
    if (out.bias_grad != nullptr) bias_backward(c, out.bias_grad, dy, m, n, n);
    gemm(c, Transpose::yes, Transpose::no, k, n, m, 1.0f, x, k, dy, n, beta, out.c, n);
  };
  if (dbias != nullptr && m > 0 && k > 0) {
    // The fused GEMM writes the column sums into scratch; they are then added to dbias.
    auto* sums = static_cast<float*>(ctx.scratch->get(ctx.stream, static_cast<size_t>(n) * sizeof(float), op));
    const GemmCall call{.ta = Transpose::yes, .m = k, .n = n, .k = m, .a = x, .lda = k, .b = dy, .ldb = n,
                        .beta = beta, .c = dw, .ldc = n, .epilogue = Epilogue::bias_grad_b, .bias_grad = sums};
    if (ctx.gemm->run(ctx, op, call, kernels)) {
      add(ctx, dbias, dbias, sums, n);
      return;
    }
  }
  kernels(ctx, GemmCall{.c = dw, .bias_grad = dbias});
}

}  // namespace axonn::cuda
