#pragma once
// The GPU counts of `axonn layout --scan`: "A:B", A doubled up to B (8:64 = 8, 16, 32, 64),
// or a list "A,B,C" in increasing order. A malformed value is a UsageError naming it and the fix.
#include <string>
#include <vector>

namespace axonn {

// At most this many counts in one scan: doubling from 1 to the chooser's limit of 2^24 GPUs
// is 25 of them, and each costs a chooser run.
inline constexpr size_t kMaxScanCounts = 64;

// Counts in increasing order, each in [1, max_gpus].
std::vector<int> parse_scan_counts(const std::string& text, int max_gpus);

// UsageError for the first count that is not a whole number of nodes of gpus_per_node GPUs;
// per_node_from says where gpus_per_node came from ("--gpus-per-node", "site dgx-h100's
// gpus_per_node").
void require_whole_nodes(const std::vector<int>& counts, int gpus_per_node, const std::string& per_node_from);

}  // namespace axonn
