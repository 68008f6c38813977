// libFuzzer target for the strict site and job TOML validation (config/): what users
// write in job TOMLs and on the command line (section.key=value overrides), and what site
// admins write in site configs, which the SPANK plugin also reads inside srun.
//
// The first input byte picks the reader, the rest is its input:
//   0: a site config (then the chooser's view of it on a few nodes, switches included);
//   1: a job TOML on the default site;
//   2: a job TOML, then '\0'-separated command-line overrides.
// Beyond ASan and UBSan: each returns or throws ConfigError (anything else escapes and
// aborts); a config it returns keeps the invariants the validation promises (the MoE keys'
// included); every message
// starts with the file name and holds no control character (a NUL would cut it short).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_error.hpp"
#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "fuzz_checks.hpp"

namespace {

using axonn::fuzz::require;

void check_message(const axonn::ConfigError& e, const std::string& file, size_t input_size) {
  const std::string_view m = e.what();
  require(m.rfind(file + ":", 0) == 0, m);
  // Messages quote what the file says, so they may be as long as it, plus the lists of
  // valid keys and values.
  require(m.size() <= input_size + 4096, m);
  for (char c : m) require(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f, m);
}

void fuzz_site(const std::string& text) {
  axonn::SiteConfig site;
  try {
    site = axonn::load_site_config_string(text, "site.toml");
  } catch (const axonn::ConfigError& e) {
    check_message(e, "site.toml", text.size());
    return;
  }
  require(site.gpus_per_node >= 1 && site.memory_gib > 0 && site.efficiency > 0 && site.efficiency <= 1);
  require(site.switches.empty() || site.nodes_per_switch == 0);
  for (const auto& hosts : site.switches) require(!hosts.empty());
  // Each tier's overlap: fractions in [-1, 1] at sizes ascending, each once (a flat one's
  // single point may have bytes 0), so interpolating between them stays in [-1, 1].
  for (const axonn::SiteTier& tier : axonn::kSiteTiers) {
    const axonn::OverlapCurve& curve = site.*tier.overlap;
    for (size_t i = 0; i < curve.points.size(); ++i) {
      const axonn::OverlapPoint& p = curve.points[i];
      require(p.fraction >= -1 && p.fraction <= 1);
      require(i == 0 ? p.bytes >= 0 : p.bytes > curve.points[i - 1].bytes);
      require(curve.points.size() == 1 || p.bytes > 0);
    }
    for (const double bytes : {1.0, 65536.0, 1e12}) require(curve.at(bytes) >= -1 && curve.at(bytes) <= 1);
  }
  // The chooser's view on the first hosts the switch map lists (or two unnamed nodes).
  std::vector<std::string> hostnames;
  for (const auto& hosts : site.switches)
    for (const auto& host : hosts)
      if (hostnames.size() < 6) hostnames.push_back(host);
  const int nodes = hostnames.empty() ? 2 : static_cast<int>(hostnames.size());
  try {
    const axonn::ChooserInput in = axonn::chooser_input(site, axonn::JobConfig{}, nodes, site.gpus_per_node, hostnames);
    require(in.machine.nodes_per_switch >= 0);
  } catch (const axonn::ConfigError& e) {
    axonn::fuzz::require_printable_line(std::string(e.what()).substr(0, 256), 4096);
  }
}

// A mixture-of-experts model routes each token to top_k of its experts, in every moe_every-th
// block; a dense model carries the MoE keys' defaults, since setting one is an error.
void check_experts(const axonn::ModelShape& m) {
  require(m.experts >= 0);
  if (!m.moe()) {
    const axonn::ModelShape defaults;
    require(m.top_k == defaults.top_k && m.moe_every == defaults.moe_every &&
            m.capacity_factor == defaults.capacity_factor && m.aux_loss_weight == defaults.aux_loss_weight);
    return;
  }
  require(m.top_k >= 1 && m.top_k <= 2 && m.top_k <= m.experts);
  require(m.moe_every >= 1 && m.moe_every <= m.layers && m.is_moe_block(m.moe_every - 1));
  require(m.capacity_factor >= 0 && m.capacity_factor <= 1e6);
  require(m.aux_loss_weight >= 0 && m.aux_loss_weight <= 1e6);
}

void fuzz_job(const std::string& text, const std::vector<std::string>& overrides) {
  static const axonn::SiteConfig site = axonn::load_site_config_string("", "default-site");
  try {
    const axonn::JobConfig job = axonn::load_job_config_string(text, "job.toml", site, overrides);
    const axonn::ModelShape& m = job.model;
    require(m.layers >= 1 && m.hidden >= 1 && m.heads >= 1 && m.hidden % m.heads == 0 && m.vocab >= 2);
    check_experts(m);
    const axonn::TrainingConfig& t = job.training;
    require(t.micro_batch >= 1 && t.micro_batch <= t.global_batch);
    require(t.min_lr <= t.lr && t.warmup_steps <= t.steps);
    require(job.checkpoint.keep >= 1 && job.run.log_interval >= 1);
  } catch (const axonn::ConfigError& e) {
    size_t input_size = text.size();
    for (const std::string& o : overrides) input_size += o.size();
    check_message(e, "job.toml", input_size);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      fuzz_site(text);
      break;
    case 1:
      fuzz_job(text, {});
      break;
    default: {
      std::vector<std::string> parts;
      size_t start = 0;
      for (size_t i = 0; i <= text.size(); ++i)
        if (i == text.size() || text[i] == '\0') {
          parts.push_back(text.substr(start, i - start));
          start = i + 1;
        }
      fuzz_job(parts[0], std::vector<std::string>(parts.begin() + 1, parts.end()));
    }
  }
  return 0;
}
