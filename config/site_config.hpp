#pragma once
// A site's hardware and policy (site_configs/<site>.toml; every key documented in
// site_configs/example.toml). Plain struct with explicit defaults; units in the names.
#include <string>
#include <vector>

#include "layout/layout_inputs.hpp"

namespace axonn {

struct SiteConfig {
  std::string source;  // file it was loaded from
  std::string name = "unnamed";
  // [node]
  int gpus_per_node = 1;
  double memory_gib = 16;  // per GPU
  // [compute], per GPU
  double peak_tflops_float32 = 1;
  double peak_tflops_bfloat16 = 1;
  double efficiency = 0.5;  // achieved fraction of peak in the model's GEMMs
  // [network], bandwidth per GPU per direction
  double intra_node_bandwidth_GBps = 100;
  double intra_node_latency_us = 2;
  double inter_node_bandwidth_GBps = 25;
  double inter_node_latency_us = 5;
  double inter_switch_bandwidth_GBps = 12.5;
  double inter_switch_latency_us = 10;
  int nodes_per_switch = 0;  // 0: one switch for all nodes
  // Or the hosts under each switch, host lists expanded ("nid[001-016]" -> 16 names);
  // empty: use nodes_per_switch. At most one of the two is set.
  std::vector<std::vector<std::string>> switches;
  // [policy]
  std::vector<int> allowed_axis_sizes;  // empty: any
  int max_tensor_parallel = 0;          // 0: no limit
  ElementType default_dtype = ElementType::float32;
  std::string checkpoint_dir = "checkpoints";  // relative: against the job's working directory
  int signal_lead_s = 120;
  std::string preempt_signal = "USR1";  // run.preempt_signal of jobs that do not set it
  double memory_headroom = 0.1;
  // [cost], per GPU; 0: not known, and `axonn layout --scan` leaves energy and cost out
  double gpu_power_watts = 0;  // power drawn while training (the TDP, or a measured figure)
  double gpu_hour_cost = 0;    // price of one GPU for one hour, in the site's currency
};

// Throws ConfigError with file:line:column for unknown keys, wrong types, bad values.
SiteConfig load_site_config(const std::string& path);
SiteConfig load_site_config_string(const std::string& text, const std::string& name);

// The [policy] restrictions the chooser applies.
Policy site_policy(const SiteConfig& site);

// The values run.preempt_signal (job) and policy.preempt_signal (site) may take.
inline const std::vector<std::string> kPreemptSignals = {"USR1", "USR2", "HUP"};

// The element type a dtype key names: "float32" | "bfloat16".
ElementType parse_element_type(const std::string& name);

}  // namespace axonn
