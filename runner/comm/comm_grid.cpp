#include "comm/comm_grid.hpp"

#include "comm/gloo_communicator.hpp"
#include "comm/gloo_mesh.hpp"
#include "comm/single_rank_communicator.hpp"

namespace axonn {

CommGrid::CommGrid(Exchange& exchange, const Layout& layout, std::chrono::milliseconds timeout, bool single_host)
    : layout_(layout) {
  if (layout.world() != exchange.size())
    throw CommError("layout " + format_layout(layout) + " has " + std::to_string(layout.world()) +
                    " ranks but the job has " + std::to_string(exchange.size()) +
                    "; use a layout whose product is the task count");
  coords_ = layout.coords(exchange.rank());

  // Groups of size > 1, connected together; the rest are single-rank communicators.
  std::vector<GroupSpec> specs;
  std::vector<CommAxis> spec_axes;
  for (int a = 0; a < kCommAxisCount; ++a) {
    const auto axis = static_cast<CommAxis>(a);
    std::vector<int> members;
    if (axis == CommAxis::world) {
      for (int r = 0; r < layout.world(); ++r) members.push_back(r);
    } else {
      members = layout.group(static_cast<Axis>(a), exchange.rank());
    }
    if (members.size() > 1) {
      specs.push_back({comm_axis_name(axis), members});
      spec_axes.push_back(axis);
    } else {
      comms_[static_cast<size_t>(a)] = std::make_unique<SingleRankCommunicator>(comm_axis_name(axis), exchange.rank());
    }
  }
  if (specs.empty()) return;
  const auto contexts = connect_gloo_groups(exchange, make_gloo_device(single_host), specs, timeout, "grid");
  for (size_t i = 0; i < specs.size(); ++i) {
    const CommAxis axis = spec_axes[i];
    auto recorder = [this, axis](const CollectiveRecord& r) {
      auto& c = counters_[static_cast<size_t>(axis)][static_cast<size_t>(r.kind)];
      ++c.calls;
      c.bytes += static_cast<int64_t>(r.bytes);
      c.time += r.duration;
      if (logger_) logger_(axis, r);
    };
    comms_[static_cast<size_t>(axis)] = std::make_unique<GlooCommunicator>(specs[i], contexts[i], timeout, recorder);
  }
}

CommGrid::~CommGrid() = default;

}  // namespace axonn
