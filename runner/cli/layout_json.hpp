#pragma once
// `axonn layout --json`: the chooser's result as one JSON object (built as a toml++ table
// and printed with its JSON formatter): input, best, ranked[], rejected[].
#include <string>

#include "layout/layout_search.hpp"

namespace axonn {

// ranks_from: where the node and GPU counts came from ("the Slurm allocation: ..."), empty
// for the command line.
std::string layout_result_json(const ChooserResult& result, int top_k, const std::string& no_fit_change,
                               const std::string& ranks_from);

}  // namespace axonn
