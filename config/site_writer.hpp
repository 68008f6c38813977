#pragma once
// A site config as TOML text that load_site_config reads back to the same SiteConfig, and the
// per-key differences of two site configs. `axonn calibrate` writes its output with them and
// prints what it changed.
#include <string>
#include <vector>

#include "config/site_config.hpp"

namespace axonn {

// One key of a site config.
struct SiteKey {
  std::string table;    // "compute", "network.intra_node", "calibration.residual.inter_node"
  std::string name;     // "peak_tflops_float32", "all_reduce"
  std::string value;    // as TOML: 0.04, "laptop-cpu", [1, 2], { latency_us = 30, bandwidth_GBps = 2 }
  std::string summary;  // how a difference shows it when the value spans lines ("12 shapes"); else empty
  std::string comment;  // unit or meaning, for the file; may be empty
};

// Every key of `site`, in site_configs/example.toml's order. Keys that only a calibration
// sets (gemm_tflops_<dtype>, gemm, elementwise_GBps, the [network.<tier>] fits,
// [calibration]) are listed only when set, so a site that was never calibrated writes no
// trace of them. Numbers are written in the shortest form that reads back to the same double.
std::vector<SiteKey> site_keys(const SiteConfig& site);

// The TOML file: `header` as comment lines ("# " before each), then site_keys table by table.
std::string format_site_toml(const SiteConfig& site, const std::string& header);

// One line per key whose value differs, in site_keys order: "[compute] gemm_tflops_float32:
// (absent) -> 0.0451"; a key only `before` has ends "-> (absent)".
std::vector<std::string> site_differences(const SiteConfig& before, const SiteConfig& after);

}  // namespace axonn
