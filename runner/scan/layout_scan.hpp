#pragma once
// axonn layout --scan: the chooser at each GPU count of a scan (cli/scan_counts.hpp), and
// what its best layouts buy (layout/layout_scan.hpp), as a table or as JSON.
#include <optional>
#include <string>
#include <vector>

#include "config/job_config.hpp"
#include "layout/layout_scan.hpp"
#include "layout/layout_search.hpp"

namespace axonn {

// The chooser's answer at one GPU count.
struct ScanCount {
  int gpus = 0;
  int nodes = 0;
  std::optional<Candidate> best;    // none when no layout fits
  std::string why;                  // when none fits: the smallest change that would make one fit
  std::vector<Rejection> rejected;  // when none fits: the chooser's first rejections, in its order
  size_t rejected_total = 0;        // and how many size tuples it rejected in all
};

struct LayoutScan {
  std::string site;  // the site's name
  std::string job;   // the job TOML's path
  int gpus_per_node = 0;
  std::string per_node_from;  // "--gpus-per-node" or "site dgx-h100's gpus_per_node"
  int global_batch = 0;       // sequences per step
  int sequence = 0;           // tokens per sequence
  ScanJob prices;             // tokens per step, steps, the site's power and price per GPU
  std::vector<ScanCount> counts;
  // The counts where a layout fits, in order: their best layouts, rows and the knee among them.
  std::vector<size_t> fitting;  // indices into counts
  std::vector<ScanPoint> points;
  std::vector<ScanRow> rows;
  std::optional<ScanKnee> knee;
};

// Runs the chooser at every count (nodes = count / gpus_per_node; the counts are whole nodes).
LayoutScan scan_layouts(const SiteConfig& site, const JobConfig& job, const std::string& job_path,
                        const std::vector<int>& counts, int gpus_per_node, const std::string& per_node_from);

// The table, one row per count (a count where nothing fits says why), and the knee line.
std::string format_layout_scan(const LayoutScan& scan);

// `--json`: {site, job, gpus_per_node, ..., rows: [...], knee: {...}} (knee only when there is one).
std::string layout_scan_json(const LayoutScan& scan);

}  // namespace axonn
