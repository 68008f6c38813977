// The architectures' shapes, GPT-2's and the Llama family's (RMSNorm, SwiGLU, RoPE,
// grouped-query attention, no biases, untied embeddings), where the trainer and the layout
// model must agree without running: every rank's parameter shards (the trainer's table,
// trainer/model/parameters.hpp) add up, bucket by bucket, to what the layout model counts
// (layout/model_plan.hpp), so the gradient all-reduces it prices are the ones the trainer
// makes; the checkpoint's model_config text reads back as the same model; and a y split
// that would cut a key/value group is refused naming it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "layout/layout.hpp"
#include "layout/model_plan.hpp"
#include "runner/ckpt/ckpt_resume.hpp"
#include "trainer/model/parameters.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn {
namespace {

ModelShape gpt2() { return ModelShape{.layers = 2, .hidden = 32, .heads = 8, .vocab = 64, .sequence = 16}; }

// Llama-shaped: 8 heads of size 4 sharing 4 key/value heads, SwiGLU of 48.
ModelShape llama() {
  ModelShape m = gpt2();
  m.norm = Norm::rmsnorm;
  m.mlp = Mlp::swiglu;
  m.mlp_hidden = 48;
  m.positions = Positions::rope;
  m.kv_heads = 4;
  m.bias = false;
  m.tie_embeddings = false;
  return m;
}

struct Named {
  std::string name;
  ModelShape model;
};

std::vector<Named> architectures() {
  std::vector<Named> out = {{"gpt2", gpt2()}, {"llama", llama()}};
  ModelShape grouped_with_biases = gpt2();  // LayerNorm with beta, GELU, grouped qkv with its bias
  grouped_with_biases.kv_heads = 2;
  out.push_back({"gqa-with-biases", grouped_with_biases});
  ModelShape swiglu_with_biases = gpt2();
  swiglu_with_biases.mlp = Mlp::swiglu;
  swiglu_with_biases.mlp_hidden = 40;
  out.push_back({"swiglu-with-biases", swiglu_with_biases});
  ModelShape untied = gpt2();
  untied.tie_embeddings = false;
  out.push_back({"untied", untied});
  ModelShape llama_moe = llama();  // GELU experts behind a Llama-shaped attention
  llama_moe.mlp = Mlp::gelu;
  llama_moe.experts = 4;
  out.push_back({"llama-moe", llama_moe});
  return out;
}

TEST(ModelArchitecture, EveryRanksShardsAddUpToTheLayoutModelsCountsBucketByBucket) {
  for (const Named& a : architectures()) {
    for (const char* text : {"1x1x1x1", "1x2x1x1", "1x1x2x1", "1x1x1x2", "2x2x2x2", "4x1x1x1e2"}) {
      const Layout layout = parse_layout(text);
      if (layout.experts > 1 && !a.model.moe()) continue;
      const std::string what = a.name + " at " + text;
      const ParameterCount count = parameters_per_rank(a.model, layout);
      const GradientBuckets buckets = gradient_buckets(a.model, layout);
      for (int rank = 0; rank < layout.world(); ++rank) {
        const ParameterLayout table = parameter_layout(a.model, layout, layout.coords(rank));
        int64_t elements = 0;
        for (const ParamSlot& slot : table.slots) elements += slot.count;
        EXPECT_EQ(elements, count.total()) << what;
        EXPECT_EQ(table.total, count.total()) << what;
        EXPECT_EQ(table.sharded, count.big) << what;
        EXPECT_EQ(table.bucket("wte").count, buckets.wte) << what;
        EXPECT_EQ(table.small_bucket().count, buckets.small) << what;
        for (int l = 0; l < a.model.layers; ++l) {
          EXPECT_EQ(table.bucket("h." + std::to_string(l)).count, buckets.of_block(a.model, l)) << what << " block " << l;
          if (a.model.is_moe_block(l)) {
            EXPECT_EQ(table.bucket("h." + std::to_string(l) + ".experts").count, buckets.moe_experts) << what;
          }
        }
      }
    }
  }
}

TEST(ModelArchitecture, LlamasTensorsAreTheOnesItsFamilyHas) {
  const ModelShape m = llama();
  const ParameterLayout table = parameter_layout(m, parse_layout("1x1x1x1"), Coords{});
  EXPECT_TRUE(table.has("lm_head.weight"));
  EXPECT_FALSE(table.has("wpe"));
  EXPECT_FALSE(table.has("ln_f.bias"));
  EXPECT_FALSE(table.has("h.0.ln1.bias"));
  EXPECT_FALSE(table.has("h.0.attn.qkv.bias"));
  EXPECT_FALSE(table.has("h.1.mlp.proj.bias"));
  // [C, KV, H/KV + 2, d]: 4 groups of 2 query heads, k and v, each of size 4.
  EXPECT_EQ(table.slot("h.0.attn.qkv.weight").spec.shape, (std::vector<int64_t>{32, 4, 4, 4}));
  EXPECT_EQ(table.slot("h.0.mlp.fc.weight").spec.shape, (std::vector<int64_t>{32, 2, 48}));
  EXPECT_EQ(table.slot("h.0.mlp.proj.weight").spec.shape, (std::vector<int64_t>{48, 32}));
  // A y split takes whole groups: rank y = 1 of 2 holds groups 2 and 3, all of each.
  const Layout y2 = parse_layout("1x1x2x1");
  const ParameterLayout second = parameter_layout(m, y2, y2.coords(1));
  const Rect& qkv = second.slot("h.0.attn.qkv.weight").rect;
  EXPECT_EQ(qkv.offset, (std::vector<int64_t>{0, 2, 0, 0}));
  EXPECT_EQ(qkv.count, (std::vector<int64_t>{32, 2, 4, 4}));
}

TEST(ModelArchitecture, AYSplitThatWouldCutAKeyValueGroupIsRefusedNamingIt) {
  ModelShape m = llama();
  m.kv_heads = 2;
  const BatchShape batch{.global_batch = 8};
  EXPECT_EQ(divisibility_problem(m, batch, parse_layout("1x1x2x1")), "");
  EXPECT_EQ(divisibility_problem(m, batch, parse_layout("1x1x4x1")), "kv_heads=2 is not divisible by G_y=4");
  m.mlp_hidden = 50;
  EXPECT_EQ(divisibility_problem(m, batch, parse_layout("1x1x1x4")), "mlp_hidden=50 is not divisible by G_y*G_z=4");
}

TEST(ModelArchitecture, ModelConfigTextNamesTheArchitectureAndReadsBack) {
  EXPECT_EQ(model_config_text(gpt2()), "layers=2 hidden=32 heads=8 vocab=64 sequence=16");  // as it always was
  ModelShape m = llama();
  m.norm_eps = 1e-6;
  m.rope_theta = 500000;
  m.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 8192};
  const std::string text = model_config_text(m);
  EXPECT_EQ(text,
            "layers=2 hidden=32 heads=8 vocab=64 sequence=16 norm=rmsnorm norm_eps=1e-06 mlp=swiglu mlp_hidden=48 "
            "positions=rope rope_theta=500000 rope_scaling=llama3:8:1:4:8192 kv_heads=4 bias=false "
            "tie_embeddings=false");
  const ModelShape back = parse_model_config(text, "index.h5");
  EXPECT_EQ(model_config_text(back), text);
  EXPECT_EQ(back.norm_eps, 1e-6);
  EXPECT_EQ(back.rope_scaling, m.rope_scaling);
  EXPECT_EQ(back.kv(), 4);
  EXPECT_FALSE(back.tie_embeddings);

  for (const std::string& bad :
       {std::string("layers=2 hidden=32 heads=8 vocab=64 sequence=16 norm=batchnorm"),
        std::string("layers=2 hidden=32 heads=8 vocab=64 sequence=16 kv_heads=3"),
        std::string("layers=2 hidden=32 heads=8 vocab=64 sequence=16 mlp_hidden=128"),  // GPT-2's default written out
        std::string("layers=2 hidden=32 heads=8 vocab=64 sequence=16 bias=false norm=rmsnorm"),  // out of order
        std::string("layers=2 hidden=32 heads=8 vocab=64 sequence=16 positions=rope rope_scaling=yarn:2")}) {
    EXPECT_THROW(parse_model_config(bad, "index.h5"), FormatError) << bad;
  }
}

}  // namespace
}  // namespace axonn
