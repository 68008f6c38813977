#pragma once
// Human-readable views of a ChooserResult for `axonn layout` (strings only, no I/O).
#include <string>

#include "layout/layout_search.hpp"

namespace axonn {

// Ranked table, best first: layout, axis order, predicted step time, compute time,
// per-axis communication time and bytes, memory per GPU and headroom.
std::string format_ranked_table(const ChooserResult& result, int top_k);

// The best layout with its link tiers per axis, the memory formula with this job's
// numbers, why each runner-up lost, and every rejected size tuple grouped by reason.
std::string format_explain(const ChooserResult& result, int top_k);

}  // namespace axonn
