#include "checkpoint/tensor_table.hpp"

#include <algorithm>
#include <stdexcept>

#include "checkpoint/checkpoint_error.hpp"

namespace axonn {

const TensorInfo& find_tensor(const std::vector<TensorInfo>& table, const std::string& name, const std::string& where) {
  for (const TensorInfo& t : table) {
    if (t.name == name) return t;
  }
  // Name a few stored tensors sharing the longest prefix, to point at the typo or rename.
  std::vector<std::pair<size_t, std::string>> near;
  for (const TensorInfo& t : table) {
    const auto mismatch = std::mismatch(name.begin(), name.end(), t.name.begin(), t.name.end());
    near.emplace_back(static_cast<size_t>(mismatch.first - name.begin()), t.name);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string hint;
  for (size_t i = 0; i < near.size() && i < 3; ++i) hint += (i ? ", '" : "'") + near[i].second + "'";
  throw RequestMismatch(where, "find tensor",
                        "checkpoint " + where + " has no tensor '" + name + "' (it stores " +
                            std::to_string(table.size()) + " tensors" + (hint.empty() ? "" : ", e.g. " + hint) +
                            "): the model does not match the checkpoint's model config");
}

void check_request(const TensorInfo& info, const std::vector<int64_t>& expected_shape, const Rect& rect,
                   const std::string& where) {
  if (info.global_shape != expected_shape) {
    throw RequestMismatch(where, "check shape",
                          "tensor '" + info.name + "' in " + where + " has global shape " +
                              shape_string(info.global_shape) + " but the model expects " +
                              shape_string(expected_shape) +
                              ": the model config differs from the one the checkpoint was written with");
  }
  try {
    validate_rect(info.global_shape, rect, "tensor '" + info.name + "'");
  } catch (const std::invalid_argument& e) {
    throw RequestMismatch(where, "check rectangle", std::string(e.what()) + " (reading " + where + ")");
  }
}

}  // namespace axonn
