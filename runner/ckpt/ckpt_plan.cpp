// axonn ckpt plan DIR --layout DxXxYxZ[eN][:order] [--step N] [--fallback] [--global-batch B] [--json]
// A dry run of `axonn train` resuming DIR at another layout: is the layout valid for the
// checkpoint's model (and batch), which shard files each new rank opens, and how many bytes
// it reads (plan_reads: exactly what CheckpointReader::bytes_read() counts on a verified
// resume), against what a load at the layout that wrote the checkpoint reads; and the same
// with the optimizer sharded over data (each data rank reads its pieces of the moments).
#include <toml++/toml.h>

#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "checkpoint/step_dir.hpp"
#include "runner/cli/args.hpp"
#include "runner/ckpt/ckpt.hpp"
#include "runner/ckpt/ckpt_format.hpp"
#include "runner/ckpt/ckpt_open.hpp"
#include "runner/ckpt/ckpt_resume.hpp"
#include "core/exit_codes.hpp"
#include "layout/model_plan.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn {
namespace {

struct BatchSource {
  std::optional<int> global_batch;
  std::string from;  // where it came from, for the output
};

BatchSource batch_source(const Args& args, const Metadata& m) {
  if (auto b = args.integer("global-batch", 1, 1 << 30)) return {static_cast<int>(*b), "--global-batch"};
  const auto it = m.ints.find("training.global_batch");
  if (it != m.ints.end() && it->second > 0 && it->second <= (1 << 30))
    return {static_cast<int>(it->second), "the checkpoint's meta.int.training.global_batch"};
  return {std::nullopt, "not recorded in the checkpoint and no --global-batch: not checked"};
}

// Whether the run that wrote the checkpoint had its optimizer sharded over data (recorded
// since training.shard_optimizer exists; older checkpoints were written unsharded).
bool written_sharded(const Metadata& m) {
  const auto it = m.ints.find("training.shard_optimizer");
  return it != m.ints.end() && it->second != 0;
}

// The plan of a load at the layout that wrote the checkpoint, in the mode that wrote it, when
// its metadata names a layout that still divides the model (other tools' may name none).
std::optional<std::pair<Layout, ReadPlan>> same_layout_plan(const CheckpointReader& reader, const ModelShape& model) {
  try {
    const Layout written = parse_layout(reader.metadata().layout);
    return std::make_pair(
        written, plan_reads(reader.tensors(), resume_requests(model, written, written_sharded(reader.metadata()))));
  } catch (const LayoutError&) {
    return std::nullopt;
  }
}

std::string written_mode(const Metadata& m, const Layout& written) {
  return shards_optimizer(written, written_sharded(m)) ? ", optimizer sharded" : "";
}

// Why `layout` cannot resume the checkpoint's model at `batch`; empty when it can. The model is
// the checkpoint's, so a layout's expert parallelism that does not suit it is fixed in the
// layout alone.
std::string resume_problem(const ModelShape& model, const BatchShape& batch, const Layout& layout) {
  if (!model.moe() && layout.experts > 1) {
    const std::string ep = std::to_string(layout.experts);
    std::string why = "e" + ep;
    why += " asks for expert parallelism " + ep + " but the checkpoint's model is dense; drop 'e" + ep + "'";
    return why;
  }
  return divisibility_problem(model, batch, layout);
}

std::string with_bytes(int64_t bytes) { return human_bytes(bytes) + " (" + std::to_string(bytes) + " B)"; }

double ratio(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

// Per rank: its files, the bytes it reads and the bytes it wants, in columns.
std::string rank_rows(const ReadPlan& plan) {
  char line[256];
  std::snprintf(line, sizeof line, "%6s  %5s  %-26s  %-26s  %s\n", "rank", "files", "bytes read", "bytes wanted",
                "shard files");
  std::string out = line;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankReadPlan& rp = plan.ranks[r];
    std::string files;
    for (const std::string& f : rp.files) files += (files.empty() ? "" : ", ") + f;
    std::snprintf(line, sizeof line, "%6zu  %5zu  %-26s  %-26s  ", r, rp.files.size(),
                  with_bytes(rp.bytes_read).c_str(), with_bytes(rp.bytes_wanted).c_str());
    out += line + files + "\n";
  }
  return out;
}

std::string plan_text(const CheckpointReader& reader, const ModelShape& model, const BatchSource& batch,
                      const Layout& layout, const ReadPlan& plan, const std::optional<ReadPlan>& sharded,
                      const std::optional<std::pair<Layout, ReadPlan>>& same) {
  const Metadata& m = reader.metadata();
  std::string out = "checkpoint  " + reader.step_dir().string() + " (step " + std::to_string(reader.step()) +
                    "), written at " + (m.layout.empty() ? "an unrecorded layout" : m.layout) + "\n";
  out += "model       " + model_config_text(model) + " (the checkpoint's model_config)\n";
  out += "batch       " + (batch.global_batch ? "global_batch=" + std::to_string(*batch.global_batch) + " (" : "(") +
         batch.from + ")\n";
  out += "layout      " + format_layout_with_order(layout) + " (" + ranks_text(layout.world()) +
         "): valid, it divides the model" + (batch.global_batch ? " and the batch" : "") + "\n";
  out += "reads       every parameter and both AdamW moments (what axonn train reads on resume), " +
         std::to_string(reader.tensors().size()) + " tensors, verified: whole checksum blocks\n\n";
  out += "optimizer unsharded (training.shard_optimizer = false): every rank reads its shard of each moment\n";
  out += rank_rows(plan);
  char line[256];
  std::snprintf(line, sizeof line, "%.2fx", ratio(plan.bytes_read, plan.bytes_wanted));
  out += "\ntotal       reads " + with_bytes(plan.bytes_read) + " for " + human_bytes(plan.bytes_wanted) + " wanted (" +
         line + "); the checkpoint stores " + human_bytes(plan.bytes_stored) + "\n";
  if (same) {
    std::snprintf(line, sizeof line, "%.2fx", ratio(plan.bytes_read, same->second.bytes_read));
    out += "vs written  a load at " + format_layout_with_order(same->first) + " (" + ranks_text(same->first.world()) +
           written_mode(m, same->first) + ") reads " + with_bytes(same->second.bytes_read) + "; this layout reads " +
           line + " that\n";
  } else {
    out += "vs written  the layout that wrote the checkpoint ('" + m.layout + "') is unknown here: no comparison\n";
  }
  if (!sharded) {
    if (layout.experts > 1)
      out.append("\noptimizer sharded: not available with expert parallelism (e")
          .append(std::to_string(layout.experts))
          .append("): the reads above\n");
    else
      out += "\noptimizer sharded: G_data = 1 at this layout, nothing to shard: the reads above\n";
    return out;
  }
  out += "\noptimizer sharded (training.shard_optimizer = true) over the " + std::to_string(layout.data) +
         " data ranks: each reads every parameter of its shard and its pieces of the moments\n";
  out += rank_rows(*sharded);
  std::snprintf(line, sizeof line, "%.2fx", ratio(sharded->bytes_read, plan.bytes_read));
  out += "\ntotal       reads " + with_bytes(sharded->bytes_read) + " for " + human_bytes(sharded->bytes_wanted) +
         " wanted, " + line + " the unsharded reads\n";
  return out;
}

toml::array ranks_json(const ReadPlan& plan) {
  toml::array ranks;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    toml::array files;
    for (const std::string& f : plan.ranks[r].files) files.push_back(f);
    ranks.push_back(toml::table{{"rank", static_cast<int64_t>(r)},
                                {"files", std::move(files)},
                                {"bytes_read", plan.ranks[r].bytes_read},
                                {"bytes_wanted", plan.ranks[r].bytes_wanted}});
  }
  return ranks;
}

std::string plan_json(const CheckpointReader& reader, const BatchSource& batch, const Layout& layout,
                      const std::string& problem, const ReadPlan* plan, const std::optional<ReadPlan>& sharded,
                      const std::optional<std::pair<Layout, ReadPlan>>& same) {
  toml::table root{{"checkpoint", reader.step_dir().string()},
                   {"step", reader.step()},
                   {"written_layout", reader.metadata().layout},
                   {"model_config", reader.metadata().model_config},
                   {"global_batch_source", batch.from},
                   {"layout", format_layout_with_order(layout)},
                   {"world", layout.world()},
                   {"valid", problem.empty()},
                   {"problem", problem}};
  if (batch.global_batch) root.insert("global_batch", *batch.global_batch);
  if (plan) {
    root.insert("ranks", ranks_json(*plan));
    root.insert("bytes_read", plan->bytes_read);
    root.insert("bytes_wanted", plan->bytes_wanted);
    root.insert("bytes_stored", plan->bytes_stored);
    if (same) {
      root.insert("same_layout", toml::table{{"layout", format_layout_with_order(same->first)},
                                             {"shard_optimizer", !written_mode(reader.metadata(), same->first).empty()},
                                             {"bytes_read", same->second.bytes_read}});
      root.insert("ratio_to_same_layout", ratio(plan->bytes_read, same->second.bytes_read));
    }
    // The same resume with the optimizer sharded over data: absent where G_data = 1.
    if (sharded)
      root.insert("sharded_optimizer", toml::table{{"ranks", ranks_json(*sharded)},
                                                   {"bytes_read", sharded->bytes_read},
                                                   {"bytes_wanted", sharded->bytes_wanted}});
  }
  std::ostringstream out;
  out << toml::json_formatter{root} << "\n";
  return out.str();
}

}  // namespace

int ckpt_plan(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"layout", true,
       "the new layout DxXxYxZ[eN][:order] (data x X x Y x Z, N the expert parallelism, order fastest axis first)"},
      {"step", true, "plan another committed step than `latest` (DIR is then the checkpoint directory)"},
      {"fallback", false, "when the step does not open, plan the newest older one that does (and say so)"},
      {"global-batch", true, "check this global batch instead of the one the checkpoint records"},
      {"json", false, "print the plan as JSON"},
      {"help", false, "this help"},
  };
  const std::optional<Args> parsed =
      parse_or_usage(argv, specs, "axonn ckpt plan DIR --layout DxXxYxZ[eN][:order] [options]");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().size() != 1)
    throw UsageError("takes one DIR, got " + std::to_string(args.positionals().size()) +
                     "; usage: axonn ckpt plan DIR --layout DxXxYxZ[eN][:order]");
  const Layout layout = parse_layout(args.required("layout"));
  const StepChoice choice =
      choose_step(args.positionals()[0], args.integer("step", 0, std::numeric_limits<long>::max()));
  const CheckpointReader reader = open_step_choice(choice, args.has("fallback"), "ckpt plan");
  const std::string index_file = (reader.step_dir() / kIndexFileName).string();
  const ModelShape model = parse_model_config(reader.metadata().model_config, index_file);
  const BatchSource batch = batch_source(args, reader.metadata());
  BatchShape batch_shape;
  // Without a known batch only the model is checked: a batch of G_data*G_z always divides.
  batch_shape.global_batch = batch.global_batch.value_or(layout.data * layout.z);
  const std::string problem = resume_problem(model, batch_shape, layout);
  if (!problem.empty()) {
    if (args.has("json"))
      std::fputs(plan_json(reader, batch, layout, problem, nullptr, std::nullopt, std::nullopt).c_str(), stdout);
    std::fprintf(stderr, "axonn ckpt plan: layout %s cannot resume %s: %s (model %s, global batch from %s)\n",
                 format_layout_with_order(layout).c_str(), reader.step_dir().string().c_str(), problem.c_str(),
                 reader.metadata().model_config.c_str(), batch.from.c_str());
    return exit_code::bad_input;
  }
  check_model_tensors(reader.tensors(), model, index_file);
  const ReadPlan plan = plan_reads(reader.tensors(), resume_requests(model, layout));
  std::optional<ReadPlan> sharded;
  if (shards_optimizer(layout, true)) sharded = plan_reads(reader.tensors(), resume_requests(model, layout, true));
  const auto same = same_layout_plan(reader, model);
  const std::string out = args.has("json") ? plan_json(reader, batch, layout, "", &plan, sharded, same)
                                           : plan_text(reader, model, batch, layout, plan, sharded, same);
  std::fputs(out.c_str(), stdout);
  return exit_code::ok;
}

}  // namespace axonn
