// libFuzzer target for layout strings as `axonn train` takes them: AXONN_LAYOUT from the
// environment (set by hand or by the SPANK plugin) and --layout, both through
// decide_run_layout (parse_layout, then the checks against the job's ranks and model), and
// parse_layout alone, which also reads the `layout` attribute of a checkpoint's index.h5.
//
// The first input byte picks the source (bit 0: --layout or AXONN_LAYOUT), the job's size
// (bits 1-5: 1 to 32 ranks on one or two nodes) and its model (bit 6: the tiny dense model or
// the same with 12 experts, so that expert parallelism "eN" is both refused and accepted);
// the rest is the layout text (up to its first NUL for the environment, which cannot hold
// one). Beyond ASan and UBSan: each returns or throws LayoutError (anything else escapes and
// aborts); a layout it accepts has the job's rank count, divides the model (its expert
// parallelism the experts, none for the dense model) and prints back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "runner/cli/run_layout.hpp"
#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "fuzz_checks.hpp"
#include "layout/layout.hpp"
#include "layout/model_plan.hpp"

namespace {

using axonn::fuzz::require;

// `world` ranks, on two nodes when that splits them evenly.
axonn::Topology topology_of(int world) {
  axonn::Topology t;
  t.world = world;
  t.nodes = world % 2 == 0 && world > 1 ? 2 : 1;
  t.hostnames = t.nodes == 2 ? std::vector<std::string>{"nid001", "nid002"} : std::vector<std::string>{"nid001"};
  for (int r = 0; r < world; ++r) t.node_of_rank.push_back(r * t.nodes / world);
  t.local_size = world / t.nodes;
  return t;
}

void check_message(const axonn::LayoutError& e) {
  // The layout is quoted as given, so its length bounds the message's.
  const std::string m = e.what();
  require(!m.empty() && m.size() <= 4096 + 3 * 65536);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 65536) return 0;
  static const axonn::SiteConfig site = axonn::load_site_config_string("", "default-site");
  static const std::string tiny =
      "[model]\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 256\nsequence = 64\n[training]\nglobal_batch = 24\n";
  static const axonn::JobConfig dense = axonn::load_job_config_string(tiny, "tiny.toml", site);
  static const axonn::JobConfig moe = axonn::load_job_config_string(tiny, "tiny-moe.toml", site, {"model.experts=12"});
  const bool from_environment = (data[0] & 1) != 0;
  const int world = 1 + (data[0] >> 1) % 32;
  const axonn::JobConfig& job = (data[0] & 0x40) != 0 ? moe : dense;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  try {
    const axonn::Layout l = axonn::parse_layout(text);
    require(l.data >= 1 && l.x >= 1 && l.y >= 1 && l.z >= 1);
    require(l.experts >= 1 && l.data % l.experts == 0);
    require(int64_t{l.data} * l.x * l.y * l.z == l.world());
    require(axonn::parse_layout(axonn::format_layout_with_order(l)) == l);
  } catch (const axonn::LayoutError& e) {
    check_message(e);
  }

  std::optional<std::string> option;
  if (from_environment) {
    text = text.substr(0, text.find('\0'));
    if (text.empty()) return 0;  // unset: the chooser decides, no layout text is read
    require(setenv("AXONN_LAYOUT", text.c_str(), 1) == 0);
    unsetenv("AXONN_LAYOUT_ORIGIN");
  } else {
    unsetenv("AXONN_LAYOUT");
    option = text;
  }
  try {
    const axonn::RunLayout run = axonn::decide_run_layout(topology_of(world), site, job, option);
    require(run.layout.world() == world);
    require(axonn::divisibility_problem(run.plan.model, run.plan.batch, run.layout).empty());
    require(run.layout.experts == 1 || (job.model.moe() && job.model.experts % run.layout.experts == 0));
    require(run.layout.data % run.layout.experts == 0);
    require(axonn::parse_layout(axonn::format_layout_with_order(run.layout)) == run.layout);
    require(!run.origin.empty());
  } catch (const axonn::LayoutError& e) {
    check_message(e);
  }
  return 0;
}
