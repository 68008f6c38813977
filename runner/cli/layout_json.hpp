#pragma once
// `axonn layout --json`: the chooser's result as one JSON object (built as a toml++ table
// and printed with its JSON formatter): input, best, ranked[], rejected[].
#include <string>

#include "layout/layout_search.hpp"

namespace axonn {

std::string layout_result_json(const ChooserResult& result, int top_k, const std::string& no_fit_change);

}  // namespace axonn
