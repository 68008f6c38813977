// Every feature with every other on the CUDA backend: the cases of
// tests/combination_matrix_device.txt, a covering array of strength 2 (combination_matrix.py
// --device) over training.dtype (float32, bfloat16), the communicators (Gloo, NCCL), the
// layout with the expert axis, MoE top-1/top-2 and capacity, recomputation, the sharded
// optimizer, overlap, tensor-parallel chunks, MoE exchange chunks, micro-batches per rank and
// gradient clipping. Each
// case trains 3 AdamW steps on the emulated CUDA backend (cuda_emulator.hpp), ranks as threads,
// and equals the serial run of the same model on the CPU backend in float32: losses and
// gradient norms at every step and every tensor of the final state (weights, moments) within
// the case's dtype's bound; run_steps also checks that replicas agree bit for bit and that
// every rank's counted bytes equal the layout model's. The resume at another world size is
// the process matrix's (test_train_matrix: one emulated GPU per process allows no more).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>

#include "matrix_cases.hpp"
#include "model_step.hpp"
#include "process_helpers.hpp"
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn::test {
namespace {

constexpr int kGlobalBatch = 8, kSteps = 3;

// The bounds against the float32 serial run, as measured over the cases (worst of each) and
// what a defect does. float32 differs by summation order: losses 1.2e-7 and gradient norms
// 1.6e-6 relative, the weights 5.6e-6 in root mean square over a tensor; single elements
// whose gradient is near zero move by up to 3.9e-4 (AdamW divides each update by sqrt(v), so
// such an element moves by lr = 1e-2 times its gradient's rounding over its size). bfloat16
// rounds activations and the GEMMs' weight copies to 8 bits of mantissa: losses 9.3e-4 and
// gradient norms 1e-2 relative, and after 3 AdamW steps the weights 9.2e-3 in root mean square
// (the key part of qkv.bias, whose gradient is zero in exact arithmetic, moves by +-lr on
// rounding alone), so an element bound means nothing there. A defect (a gradient left out or
// counted twice, a lost piece of state, an update not applied) moves the loss by more than
// 1e-2 relative and a whole tensor by ~lr per step (3e-2 after 3 steps).
struct Bounds {
  double loss;          // relative, every step
  double grad_norm;     // relative, every step
  double weights_rms;   // root mean square of the difference, the tensor where largest
  float element;        // any element of weights and moments; infinity: not checked
};
Bounds bounds_for(const std::string& dtype) {
  if (dtype == "float32") return {2e-5, 1e-4, 1e-4, 1e-3f};
  return {3e-3, 3e-2, 2e-2, std::numeric_limits<float>::infinity()};
}

// The weight tensor whose elements differ most in root mean square.
struct TensorDifference {
  double rms = 0;
  std::string name;
};
TensorDifference largest_weight_rms_difference(const TrainResult& got, const TrainResult& want) {
  TensorDifference worst;
  for (const auto& [name, w] : want.state) {
    if (name.starts_with("adam.")) continue;
    const std::vector<float>& g = got.state.at(name);
    double sum = 0;
    for (size_t i = 0; i < w.size(); ++i) sum += (static_cast<double>(g[i]) - w[i]) * (static_cast<double>(g[i]) - w[i]);
    const double rms = std::sqrt(sum / static_cast<double>(w.size()));
    if (rms >= worst.rms) worst = {rms, name};
  }
  return worst;
}

// test_trainer_model_emulated's model (head size 16 over 16 positions), or Llama-shaped; MoE:
// 4 experts in both blocks. Several micro-batches per rank give an MoE model a balance loss over each
// micro-batch step's tokens, which depend on the layout (docs/moe.md): those train without it.
ModelShape case_model(const MatrixCase& c) {
  ModelShape m{.layers = 2, .hidden = 32, .heads = 2, .vocab = 48, .sequence = 16};
  const std::string& model = c.level.at("model");
  if (model != "dense") {
    m.experts = 4;
    m.top_k = model == "top1" ? 1 : 2;
    m.capacity_factor = model == "top2-capacity" ? 1.5 : 0.0;
    m.moe_chunks = std::stoi(c.level.at("moe_chunks"));
    if (c.level.at("micro_batches") == "several") m.aux_loss_weight = 0;
  }
  if (c.level.at("architecture") == "llama") {  // 4 heads of size 8 sharing 2 key/value heads
    m.heads = 4;
    m.kv_heads = 2;
    m.norm = Norm::rmsnorm;
    m.positions = Positions::rope;
    m.bias = false;
    m.tie_embeddings = false;
    m.mlp = Mlp::swiglu;  // and SwiGLU experts in an MoE block (Mixtral's shape)
    m.mlp_hidden = 48;
  }
  return m;
}

int case_micro_batch(const MatrixCase& c) { return c.level.at("micro_batches") == "several" ? 2 : kGlobalBatch; }
double case_grad_clip(const MatrixCase& c) { return c.level.at("grad_clip") == "on" ? 1.0 : 0.0; }

RankSetup case_setup(const MatrixCase& c) {
  const bool bf16 = c.level.at("dtype") == "bfloat16";
  const GemmMath math = bf16 ? GemmMath::bf16 : GemmMath::fp32;
  const ElementType activations = bf16 ? ElementType::bfloat16 : ElementType::float32;
  RankSetup setup;
  setup.make_backend = [math, activations] { return make_cuda_backend(CudaBackendOptions{0, math, activations}); };
  setup.comm = c.level.at("comm") == "nccl" ? CommBackend::nccl : CommBackend::gloo;
  if (setup.comm == CommBackend::nccl) setup.compute_stream = cuda_stream_of;
  for (const Recompute mode : kRecomputeModes)
    if (c.level.at("recompute") == recompute_name(mode)) setup.recompute = mode;
  setup.shard_optimizer = c.level.at("shard_optimizer") == "true";
  setup.tp_chunks = std::stoi(c.level.at("tp_chunks"));
  return setup;
}

double relative(double got, double want) { return std::fabs(got - want) / std::max(std::fabs(want), 1e-30); }

class TrainMatrixEmulated : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(TrainMatrixEmulated, EqualsTheSerialFloat32RunOnTheCpu) {
  const MatrixCase& c = GetParam();
  const std::string what = describe(c);
  const ModelShape model = case_model(c);
  const TrainResult serial =
      run_steps(model, parse_layout("1x1x1x1"), kGlobalBatch, case_micro_batch(c), kSteps, case_grad_clip(c));
  const TrainResult run = run_steps(model, parse_layout(c.level.at("layout")), kGlobalBatch, case_micro_batch(c),
                                    kSteps, case_grad_clip(c), c.level.at("overlap_comm") == "true", case_setup(c));
  const Bounds bounds = bounds_for(c.level.at("dtype"));
  ASSERT_EQ(run.losses.size(), serial.losses.size()) << what;
  double worst_loss = 0, worst_norm = 0;
  for (size_t s = 0; s < serial.losses.size(); ++s) {
    worst_loss = std::max(worst_loss, relative(run.losses[s], serial.losses[s]));
    worst_norm = std::max(worst_norm, relative(run.grad_norms[s], serial.grad_norms[s]));
    EXPECT_LE(relative(run.losses[s], serial.losses[s]), bounds.loss)
        << what << " step " << s << ": loss " << run.losses[s] << " vs " << serial.losses[s];
    EXPECT_LE(relative(run.grad_norms[s], serial.grad_norms[s]), bounds.grad_norm)
        << what << " step " << s << ": grad norm " << run.grad_norms[s] << " vs " << serial.grad_norms[s];
  }
  const TensorDifference weights = largest_weight_rms_difference(run, serial);
  EXPECT_LE(weights.rms, bounds.weights_rms) << what << ": " << weights.name;
  const StateDifference element = state_difference(run, serial);
  EXPECT_LE(element.largest, bounds.element) << what << ": " << element.where;
  if (c.level.at("dtype") == "bfloat16") {
    EXPECT_GT(worst_loss, 0.0) << what << ": bfloat16 must round; the step ran in float32";
  }
  std::cout << "[ measured ] " << c.name << " " << c.level.at("dtype") << ": loss " << worst_loss << ", grad norm "
            << worst_norm << " relative; weights " << weights.rms << " rms in " << weights.name << ", largest element "
            << element.largest << "\n";
}

INSTANTIATE_TEST_SUITE_P(Cases, TrainMatrixEmulated,
                         ::testing::ValuesIn(read_matrix_cases(kSourceDir + "/tests/combination_matrix_device.txt")),
                         [](const ::testing::TestParamInfo<MatrixCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace axonn::test
