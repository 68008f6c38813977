#pragma once
// cuBLASLt on host memory, the calls trainer/cuda/gemm.cpp makes: column-major
// D = alpha·op(A)·op(B) + beta·C per batch (beta = 0 does not read C), inputs rounded as the
// compute type says (FAST_16BF: to bf16, FAST_TF32: to TF32), float accumulation. Layouts,
// transposes and batch strides are checked for consistency, as the heuristic would. The
// bias epilogue adds a vector with one value per row of D (16-byte aligned), BGRADA writes
// op(A)'s row sums into one; the GELU
// epilogues use GELU's tanh form (what trainer/cuda/gelu.cu computes: the GPU test of
// linear_gelu_forward is what says cuBLASLt agrees) and an aux matrix with D's shape whose
// leading dimension must be a multiple of 8.
// Types, as cuBLASLt's table of combinations: A and B of one type; CUDA_R_32F A/B with a
// CUDA_R_32F C/D at any of the three compute types; CUDA_R_16BF A/B at CUBLAS_COMPUTE_32F
// with a CUDA_R_16BF or CUDA_R_32F C/D (D rounded once, to nearest even). The aux matrix has
// D's type; the bias vector too unless CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE says CUDA_R_32F
// (that a bf16 D takes a float32 bias here is this emulation's assumption; gemm.cpp falls
// back to its own kernels when a GPU's cuBLASLt refuses it).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime_api.h"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasComputeType_t {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_BGRADA = 256,
};
enum cublasLtMatrixLayoutAttribute_t {
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // EPILOGUE_BIAS, GELU_AUX_BIAS: one value per row of D, read; BGRADA: written
  void* aux = nullptr;   // GELU_AUX_BIAS: written, D before the GELU; DGELU: read
  int64_t aux_ld = 0;
  int32_t bias_type = -1;  // -1: D's type
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {};
using cublasLtHandle_t = cublasLtContext*;
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

inline const char* cublasLtGetStatusName(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}
inline const char* cublasLtGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLASLt error";
}
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new cublasLtMatmulDescOpaque_t{compute};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                     cublasLtMatmulDescAttributes_t attribute, const void* value,
                                                     size_t bytes) {
  if (attribute == CUBLASLT_MATMUL_DESC_BIAS_POINTER || attribute == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER) {
    if (bytes != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(attribute == CUBLASLT_MATMUL_DESC_BIAS_POINTER ? static_cast<void*>(&desc->bias) : &desc->aux, value,
                sizeof(void*));
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attribute == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) {
    if (bytes != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&desc->aux_ld, value, sizeof(int64_t));
    return CUBLAS_STATUS_SUCCESS;
  }
  if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  int32_t v;
  std::memcpy(&v, value, sizeof v);
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      desc->bias_type = v;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSA:
      desc->transa = static_cast<cublasOperation_t>(v);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      desc->transb = static_cast<cublasOperation_t>(v);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      desc->epilogue = static_cast<cublasLtEpilogue_t>(v);
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  if ((type != CUDA_R_32F && type != CUDA_R_16BF) || ld <= 0 || static_cast<uint64_t>(ld) < rows)
    return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                       cublasLtMatrixLayoutAttribute_t attribute, const void* value,
                                                       size_t bytes) {
  if (attribute == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && bytes == sizeof(int32_t))
    std::memcpy(&layout->batch, value, bytes);
  else if (attribute == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && bytes == sizeof(int64_t))
    std::memcpy(&layout->batch_stride, value, bytes);
  else
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                           cublasLtMatmulPreferenceAttributes_t, const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

namespace cuda_emulator {
// op(A) (m, k) · op(B) (k, n) into C (m, n), the same batch count everywhere.
inline bool matmul_shapes(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                          const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c, uint64_t& m,
                          uint64_t& n, uint64_t& k) {
  m = d.transa == CUBLAS_OP_N ? a.rows : a.cols;
  k = d.transa == CUBLAS_OP_N ? a.cols : a.rows;
  n = d.transb == CUBLAS_OP_N ? b.cols : b.rows;
  const uint64_t k_b = d.transb == CUBLAS_OP_N ? b.rows : b.cols;
  return k_b == k && c.rows == m && c.cols == n && a.batch == c.batch && b.batch == c.batch;
}
// GELU's tanh form and its derivative, in double: an exact reference for the float kernels.
inline float gelu(float x) {
  const double v = x, u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
  return static_cast<float>(0.5 * v * (1.0 + std::tanh(u)));
}
inline float gelu_grad(float x) {
  const double v = x, t = std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
  const double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * v * v);
  return static_cast<float>(0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du);
}
inline bool uses_bias(const cublasLtMatmulDescOpaque_t& d) {
  return d.epilogue == CUBLASLT_EPILOGUE_BIAS || d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         d.epilogue == CUBLASLT_EPILOGUE_BGRADA;
}
inline bool uses_aux(const cublasLtMatmulDescOpaque_t& d) {
  return d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d.epilogue == CUBLASLT_EPILOGUE_DGELU;
}
// The epilogue's rules: batch 1, a 16-byte aligned bias, an aux matrix with a leading
// dimension that is a multiple of 8 and holds a column of D.
inline bool epilogue_valid(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& c) {
  if (d.epilogue == CUBLASLT_EPILOGUE_DEFAULT) return true;
  if (c.batch != 1) return false;
  if (uses_bias(d) && (d.bias == nullptr || reinterpret_cast<uintptr_t>(d.bias) % 16 != 0)) return false;
  return !uses_aux(d) ||
         (d.aux != nullptr && d.aux_ld % 8 == 0 && d.aux_ld >= 0 && static_cast<uint64_t>(d.aux_ld) >= c.rows);
}
// The type combinations cuBLASLt runs (this header's comment).
inline bool types_supported(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                            const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c) {
  if (a.type != b.type) return false;
  if (a.type == CUDA_R_16BF && d.compute != CUBLAS_COMPUTE_32F) return false;
  if (a.type == CUDA_R_32F && c.type != CUDA_R_32F) return false;
  return d.bias_type == -1 || d.bias_type == CUDA_R_32F || d.bias_type == c.type;
}
inline cudaDataType_t bias_type(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& c) {
  return d.bias_type == -1 ? c.type : static_cast<cudaDataType_t>(d.bias_type);
}
// Element i of a matrix or vector of `type`.
inline float element(const void* p, cudaDataType_t type, int64_t i) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
inline void set_element(void* p, cudaDataType_t type, int64_t i, float v) {
  if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}
inline float round_input(float x, cublasComputeType_t compute) {
  if (compute == CUBLAS_COMPUTE_32F_FAST_16BF) return __bfloat162float(__float2bfloat16_rn(x));
  if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) {  // 10 mantissa bits, to nearest even
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    std::memcpy(&x, &u, sizeof u);
  }
  return x;
}
}  // namespace cuda_emulator

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                     cublasLtMatmulPreference_t, int wanted,
                                                     cublasLtMatmulHeuristicResult_t* results, int* found) {
  uint64_t m, n, k;
  if (wanted < 1 || c != d || !cuda_emulator::matmul_shapes(*desc, *a, *b, *c, m, n, k))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!cuda_emulator::types_supported(*desc, *a, *b, *c) || !cuda_emulator::epilogue_valid(*desc, *c))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // Two algorithms (the same emulated product) where more than one is asked for, so that a
  // caller that times candidates (trainer/cuda/gemm.cpp) runs that path here too.
  *found = wanted < 2 ? 1 : 2;
  std::memset(results, 0, sizeof *results * static_cast<size_t>(*found));
  for (int i = 0; i < *found; ++i) results[i].state = CUBLAS_STATUS_SUCCESS;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                     const void* A, cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b,
                                     const void* beta, const void* C, cublasLtMatrixLayout_t c, void* D,
                                     cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t*, void*, size_t,
                                     cudaStream_t) {
  uint64_t m, n, k;
  if (handle == nullptr || c != d || C != D || !cuda_emulator::matmul_shapes(*desc, *a, *b, *c, m, n, k) ||
      !cuda_emulator::types_supported(*desc, *a, *b, *c))
    return CUBLAS_STATUS_INVALID_VALUE;
  // A bias vector is read 16 bytes at a time (unaligned ones fail on GPUs).
  if (!cuda_emulator::epilogue_valid(*desc, *c)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool add_bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS || desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool bias_grad = desc->epilogue == CUBLASLT_EPILOGUE_BGRADA;
  using cuda_emulator::element;
  using cuda_emulator::set_element;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const cudaDataType_t bias_type = cuda_emulator::bias_type(*desc, *c);
  // op(A) row by row and op(B) column by column, rounded once as the compute type reads them
  // (float), so the inner products below run over contiguous memory; the sums keep the order
  // l = 0, 1, ..., k-1, and so the same bits as summing straight from A and B.
  std::vector<float> a_rows(m * k), b_cols(n * k);
  for (int32_t p = 0; p < c->batch; ++p) {
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t l = 0; l < k; ++l) {
        const int64_t at =
            p * a->batch_stride + static_cast<int64_t>(desc->transa == CUBLAS_OP_N ? i + l * a->ld : l + i * a->ld);
        a_rows[i * k + l] = cuda_emulator::round_input(element(A, a->type, at), desc->compute);
      }
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t l = 0; l < k; ++l) {
        const int64_t at =
            p * b->batch_stride + static_cast<int64_t>(desc->transb == CUBLAS_OP_N ? l + j * b->ld : j + l * b->ld);
        b_cols[j * k + l] = cuda_emulator::round_input(element(B, b->type, at), desc->compute);
      }
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        const float* a_row = a_rows.data() + i * k;
        const float* b_col = b_cols.data() + j * k;
        float s = 0.0f;
        for (uint64_t l = 0; l < k; ++l) s += a_row[l] * b_col[l];
        if (bias_grad && j == 0) {  // row i of op(A) summed over k: the bias gradient (overwritten)
          float g = 0.0f;
          for (uint64_t l = 0; l < k; ++l) g += a_row[l];
          set_element(desc->bias, bias_type, static_cast<int64_t>(i), g);
        }
        const int64_t at = p * c->batch_stride + static_cast<int64_t>(i + j * c->ld);
        float out = be == 0.0f ? al * s : al * s + be * element(D, c->type, at);
        if (add_bias) out += element(desc->bias, bias_type, static_cast<int64_t>(i));
        const auto aux_at = static_cast<int64_t>(i + j * desc->aux_ld);
        if (desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
          set_element(desc->aux, c->type, aux_at, out);
          out = cuda_emulator::gelu(out);
        } else if (desc->epilogue == CUBLASLT_EPILOGUE_DGELU) {
          out *= cuda_emulator::gelu_grad(element(desc->aux, c->type, aux_at));
        }
        set_element(D, c->type, at, out);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
