#include "comm/comm_grid.hpp"

#include "comm/cuda_device.hpp"
#include "comm/gloo_communicator.hpp"
#include "comm/gloo_mesh.hpp"
#include "comm/nccl_grid.hpp"
#include "comm/rank_watch.hpp"
#include "comm/single_rank_communicator.hpp"
#include "core/json_text.hpp"
#include "core/trace_recorder.hpp"

namespace axonn {

const char* comm_backend_name(CommBackend backend) { return backend == CommBackend::gloo ? "gloo" : "nccl"; }

CommBackend parse_comm_backend(const std::string& text) {
  if (text == "gloo") return CommBackend::gloo;
  if (text == "nccl") return CommBackend::nccl;
  throw CommError("unknown communication backend '" + text +
                  "': use gloo (CPU, host buffers) or nccl (GPU, device buffers)");
}

CommGrid::CommGrid(Exchange& exchange, const Layout& layout, std::chrono::milliseconds timeout, bool single_host,
                   CommBackend backend, const std::string& key)
    : layout_(layout), backend_(backend) {
  if (layout.world() != exchange.size())
    throw CommError("layout " + format_layout(layout) + " has " + std::to_string(layout.world()) +
                    " ranks but the job has " + std::to_string(exchange.size()) +
                    "; use a layout whose product is the task count");
  coords_ = layout.coords(exchange.rank());

  std::array<GroupSpec, kCommAxisCount> groups;
  for (int a = 0; a < kCommAxisCount; ++a) {
    const auto axis = static_cast<CommAxis>(a);
    GroupSpec& g = groups[static_cast<size_t>(a)];
    g.name = comm_axis_name(axis);
    g.members = layout.comm_group(axis, exchange.rank());
  }

  if (backend == CommBackend::nccl) {
    set_cuda_check_rank(exchange.rank());
    NcclAxes axes = connect_nccl_axes(exchange, groups, timeout, key, [this](CommAxis a) { return recorder(a); });
    comms_ = std::move(axes.comms);
    nccl_ = axes.device;
    return;
  }

  // Groups of size > 1, connected together; the rest are single-rank communicators.
  std::vector<GroupSpec> specs;
  std::vector<CommAxis> spec_axes;
  for (int a = 0; a < kCommAxisCount; ++a) {
    const auto axis = static_cast<CommAxis>(a);
    const GroupSpec& g = groups[static_cast<size_t>(a)];
    if (g.members.size() > 1) {
      specs.push_back(g);
      spec_axes.push_back(axis);
    } else {
      comms_[static_cast<size_t>(a)] = std::make_unique<SingleRankCommunicator>(g.name, exchange.rank());
    }
  }
  if (specs.empty()) return;
  // Each group twice, in one bootstrap: the pairs of Gloo's own collectives, then (unless
  // turned off) the sync-mode pairs the others run on (gloo_sync.hpp).
  const size_t k = specs.size();
  const bool small_path = gloo_small_message_bytes() > 0;
  if (small_path)
    for (size_t i = 0; i < k; ++i) specs.push_back({specs[i].name + "+sync", specs[i].members});
  // The watch publishes its address before the bootstrap's fence and reads the others' after.
  watch_ = std::make_unique<RankWatch>(exchange.rank(), exchange.size(), gloo_host_address(single_host));
  watch_->publish(exchange, key);
  const auto contexts = connect_gloo_groups(exchange, make_gloo_device(single_host), specs, timeout, key);
  watch_->learn(exchange, key);
  for (size_t i = 0; i < k; ++i) {
    std::shared_ptr<gloo::Context> sync_context = small_path ? contexts[k + i] : nullptr;
    comms_[static_cast<size_t>(spec_axes[i])] = std::make_unique<GlooCommunicator>(
        specs[i], contexts[i], timeout, recorder(spec_axes[i]), sync_context, watch_.get());
  }
}

// The communicators go first, explicitly: an NCCL one finishes its queued collectives when
// destroyed and reports them through recorder(), which needs counters_ alive (members are
// destroyed after the body).
CommGrid::~CommGrid() {
  for (auto& c : comms_) c.reset();
}

int size_bucket(size_t bytes) {
  int bucket = 0;
  while (bytes > 0 && bucket + 1 < kSizeBuckets) {
    bytes >>= 1;
    ++bucket;
  }
  return bucket;
}

int64_t size_bucket_floor(int bucket) { return bucket == 0 ? 0 : int64_t{1} << (bucket - 1); }

std::function<void(const CollectiveRecord&)> CommGrid::recorder(CommAxis axis) {
  return [this, axis](const CollectiveRecord& r) {
    const auto end = std::chrono::steady_clock::now();
    {
      // A started Gloo collective reports from its communicator's thread.
      std::lock_guard lock(record_mutex_);
      auto& c = counters_[static_cast<size_t>(axis)][static_cast<size_t>(r.kind)];
      ++c.calls;
      c.bytes += static_cast<int64_t>(r.bytes);
      c.time += r.duration;
      if (r.started) c.started_time += r.duration;
      ++c.sizes[static_cast<size_t>(size_bucket(r.bytes))];
    }
    if (trace_ != nullptr) trace_collective(*trace_, axis, r, end);
  };
}

void CommGrid::trace_collective(TraceRecorder& trace, CommAxis axis, const CollectiveRecord& r,
                                std::chrono::steady_clock::time_point end) const {
  const std::string axis_name = comm_axis_name(axis);
  std::string track;
  if (backend_ == CommBackend::nccl)
    track = "nccl stream " + axis_name;
  else if (r.started)
    trace.name_this_thread_once("collectives " + axis_name);
  trace.span("comm", axis_name + " " + collective_name(r.kind), end - r.duration, end,
             {{"axis", json_string(axis_name)},
              {"kind", json_string(collective_name(r.kind))},
              {"bytes", std::to_string(r.bytes)},
              {"group", group_json_[static_cast<size_t>(axis)]},
              {"started", r.started ? "true" : "false"}},
             track);
}

void CommGrid::trace_into(TraceRecorder* trace) {
  // Each axis's group as a JSON array of world ranks, once: every collective's event names it.
  for (size_t a = 0; a < comms_.size(); ++a) {
    std::string group = "[";
    for (const int m : comms_[a]->members()) {
      if (group.size() > 1) group += ", ";
      group += std::to_string(m);
    }
    group_json_[a] = group + "]";
  }
  trace_ = trace;
}

std::array<std::chrono::nanoseconds, kCommAxisCount> CommGrid::started_wait_times() const {
  std::array<std::chrono::nanoseconds, kCommAxisCount> waited{};
  for (size_t a = 0; a < comms_.size(); ++a) waited[a] = comms_[a]->started_wait_time() - wait_baseline_[a];
  return waited;
}

void CommGrid::reset_counters() {
  counters_ = {};
  for (size_t a = 0; a < comms_.size(); ++a) wait_baseline_[a] = comms_[a]->started_wait_time();
}

void CommGrid::restore_counters(const CounterState& state) {
  counters_ = state.counters;
  for (size_t a = 0; a < comms_.size(); ++a) wait_baseline_[a] = comms_[a]->started_wait_time() - state.waited[a];
}

NcclCommunicator& CommGrid::nccl(CommAxis a) {
  NcclCommunicator* c = nccl_[static_cast<size_t>(a)];
  if (!c)
    throw CommError("axis '" + comm_axis_name(a) + "' runs on the " + comm_backend_name(backend_) +
                    " backend: NCCL streams exist only in a grid built with CommBackend::nccl");
  return *c;
}

void CommGrid::order_with_compute(void* compute_stream) {
  if (backend_ == CommBackend::nccl) return order_nccl_axes_with(nccl_, compute_stream);
  if (compute_stream != nullptr)
    throw CommError(
        "order_with_compute: this grid runs on gloo (host buffers, blocking collectives); only an nccl grid orders "
        "its collectives against a CUDA stream");
}

void CommGrid::synchronize() {
  for (auto& c : comms_) c->synchronize();
}

}  // namespace axonn
