#pragma once
// GEMMs on cuBLASLt, row-major as Backend::gemm.
//
// cuBLASLt is column-major. A row-major (rows, cols) matrix with row stride ld is the
// column-major (cols, rows) matrix with leading dimension ld, so the row-major
// C = op(A)·op(B) is computed as the column-major C^T = op(B)^T·op(A)^T: cuBLASLt's "A" is
// our B and its "B" our A, with the same transpose flags, and its (m, n) is our (n, m).
//
// Every distinct call shape (sizes, strides, transposes, batch, pointer alignments) gets a
// plan once: the matmul descriptor, the matrix layouts and the algorithm cuBLASLt's
// heuristic picks, or, with candidates > 1, the fastest of the heuristic's first
// `candidates` algorithms, each timed on the first call of the shape. Later calls of that shape only run cublasLtMatmul: no allocation, no
// heuristic query. The workspace (32 MiB, NVIDIA's recommendation for Hopper) is allocated
// once. Not thread-safe (one backend per rank).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "trainer/backend.hpp"
#include "trainer/cuda/context.hpp"
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn::cuda {

// What cuBLASLt does to a GEMM's result before it is stored (batch 1 only), R = alpha·op(A)·op(B):
//   bias:          C = R + bias (n) on every row
//   gelu_aux_bias: aux = R + bias, C = gelu(aux)       (aux written)
//   dgelu:         C = R ⊙ gelu'(aux)                  (aux read)
//   bias_grad_b:   C = R; bias_grad (n) = Σ over k of op(B) (k, n): B's column sums, e.g. dbias
//                  = Σ_rows dY beside dW = X^T·dY (cuBLASLt's BGRADA: our B is its A)
// aux is (m, n) with C's row stride ldc.
enum class Epilogue { none, bias, gelu_aux_bias, dgelu, bias_grad_b };

// One (batched) row-major GEMM: for p < batch,
//   C_p (m, n) = alpha·op(A_p)·op(B_p) + beta·C_p,  X_p = x + p·stride_x (elements),
// op(A) (m, k), op(B) (k, n); lda, ldb, ldc are the row strides as stored. beta = 0 does not
// read C. The C_p must not overlap one another; the A_p and B_p may (heads inside a packed
// qkv buffer).
// Types (cuBLASLt's combinations): A and B of one type; float32 A/B give float32 C (at the
// backend's GemmMath); bf16 A/B give bf16 or float32 C (bf16 tensor cores, float32
// accumulation, C rounded once). bias is float32, or bf16 beside a bf16 C; bias_grad is
// float32; aux has C's type.
struct GemmCall {
  Transpose ta = Transpose::no;
  Transpose tb = Transpose::no;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  ConstActPtr a = nullptr;
  int64_t lda = 0, stride_a = 0;
  ConstActPtr b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  float beta = 0.0f;
  ActPtr c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  Epilogue epilogue = Epilogue::none;
  ConstActPtr bias = nullptr;   // bias, gelu_aux_bias
  ActPtr aux = nullptr;         // gelu_aux_bias (written), dgelu (read)
  float* bias_grad = nullptr;   // bias_grad_b (written, not accumulated)
};

class Gemm {
 public:
  // The cuBLASLt handle and the workspace, on the current device. candidates: how many of
  // the heuristic's algorithms a new shape times (1: its first, untimed); 1 to 16.
  explicit Gemm(GemmMath math, int candidates = 1);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  GemmMath math() const { return math_; }
  size_t plans() const { return plans_.size(); }  // distinct shapes seen so far

  // An epilogue's result by the backend's kernels after a plain GEMM, on the given context and
  // into the outputs of the given call: its c, its aux where GELU_AUX_BIAS writes it, and its
  // bias_grad, added to (nullptr: no bias gradient).
  using EpilogueKernels = std::function<void(const Context&, const GemmCall&)>;

  // Runs `call` on ctx's stream; op names the Backend op in errors. The caller has checked
  // the arguments: m, n, k, batch >= 1 and every row stride holds a row. Returns false,
  // running nothing, for an epilogue that cuBLASLt cannot fuse (a bias not 16-byte aligned,
  // an aux row stride not a multiple of 8, or no algorithm with the epilogue for the shape),
  // and, given the epilogue's `kernels` and candidates > 1, for a shape where those are the
  // faster: timed against the fused GEMM on the shape's first call (each once untimed, then
  // three times, into outputs of their own, the kernels on a scratch of their own so that the
  // caller's pointers into ctx's stay valid) and remembered for the shape. cuBLASLt runs some
  // epilogues at a fraction of the plain GEMM's rate (a DGELU GEMM at 466 against 690 TFLOP/s
  // on an H200). On false the caller runs the epilogue's kernels itself.
  bool run(const Context& ctx, const char* op, const GemmCall& call, const EpilogueKernels& kernels = {});

 private:
  // The call's shape: transposes, m, n, k, lda, ldb, ldc, batch, the three batch strides,
  // the pointer alignments of A, B, C and aux (bytes, a power of two <= 256), the epilogue,
  // and the element types of A/B and of C.
  using Key = std::array<int64_t, 19>;
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr;  // cuBLASLt's A: our B
    cublasLtMatrixLayout_t b = nullptr;  // cuBLASLt's B: our A
    cublasLtMatrixLayout_t c = nullptr;  // C and D (in place)
    cublasLtMatmulAlgo_t algo{};
    bool ran = false;  // cublasLtMatmul has accepted it once (an epilogue plan it rejects is dropped)
    enum class Form { untimed, fused, kernels } form = Form::untimed;  // kernels_faster's finding
  };

  // The call's plan; nullptr for an epilogue without a fused algorithm (remembered too).
  Plan* plan_for(const Context& ctx, const char* op, const GemmCall& call);
  static void drop_plan(Plan& plan);
  bool try_plan(const Context& ctx, const char* op, const GemmCall& call, const Key& key, cublasComputeType_t compute,
                Plan& plan, cublasStatus_t& why);
  // The fastest of `found` algorithms for the plan's shape, timed into a GemmProbe's outputs.
  cublasLtMatmulAlgo_t fastest(const Context& ctx, const char* op, const GemmCall& call, const Plan& plan,
                               const cublasLtMatmulHeuristicResult_t* results, int found);
  // Whether the plan's epilogue runs faster as `kernels` (run()'s timing, once per shape).
  bool kernels_faster(const Context& ctx, const char* op, const GemmCall& call, Plan& plan,
                      const EpilogueKernels& kernels);
  // cublasLtMatmul of `call` with the plan's descriptors and `algo`, D in place of C.
  cublasStatus_t matmul(const Context& ctx, const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmCall& call);

  GemmMath math_;
  int candidates_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

// Backend::gemm: the CPU backend's argument checks and GemmCall's type rules; m = 0 or n = 0
// does nothing, k = 0 sets C = beta·C (cuBLASLt is not called for an empty product).
void gemm(const Context& ctx, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, ConstActPtr a,
          int64_t lda, ConstActPtr b, int64_t ldb, float beta, ActPtr c, int64_t ldc);

// Backend::linear_forward, linear_gelu_forward and linear_input_grad_gelu: one GEMM where
// cuBLASLt can fuse the epilogue, else the GEMM, then the bias or GELU kernels.
void linear_forward(const Context& ctx, ActPtr y, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m, int64_t n,
                    int64_t k);
void linear_gelu_forward(const Context& ctx, ActPtr pre, ActPtr out, ConstActPtr x, ConstActPtr w, const float* bias,
                         int64_t m, int64_t n, int64_t k);
void linear_input_grad_gelu(const Context& ctx, ActPtr dpre, ConstActPtr dy, ConstActPtr w, ConstActPtr pre, int64_t m,
                            int64_t n, int64_t k);
// Backend::linear_weight_grad: dbias from the dW GEMM (into scratch, then added) where
// cuBLASLt can, else bias_backward and the GEMM.
void linear_weight_grad(const Context& ctx, float* dw, float beta, float* dbias, ConstActPtr x, ConstActPtr dy,
                        int64_t m, int64_t n, int64_t k);

}  // namespace axonn::cuda
