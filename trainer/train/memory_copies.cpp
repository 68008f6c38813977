#include "trainer/train/memory_copies.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <system_error>
#include <thread>

#include "checkpoint/memory_shard.hpp"
#include "checkpoint/memory_steps.hpp"
#include "config/config_error.hpp"
#include "core/number_text.hpp"
#include "trainer/train/host_exchange.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

// A save's peer link messages carry its step as their tag (one save is in flight at a time),
// the top bit clear: a restore's have it set (memory_restore.cpp).
uint32_t save_tag(int64_t step) { return static_cast<uint32_t>(step) & 0x7FFFFFFFu; }

}  // namespace

fs::path memory_job_dir(const fs::path& memory_dir, const std::string& job, const std::string& checkpoint_dir) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a: a name, not a checksum
  for (const char c : checkpoint_dir) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return memory_dir / fmt::format("axonn-{}-{:08x}", job, static_cast<uint32_t>(hash ^ (hash >> 32)));
}

MemoryCopyPlan plan_memory_copies(std::span<const int> node_of_rank, int rank, fs::path node_dir) {
  MemoryCopyPlan plan;
  plan.node_dir = std::move(node_dir);
  plan.rank = rank;
  plan.world = static_cast<int>(node_of_rank.size());
  plan.node = node_of_rank[static_cast<size_t>(rank)];
  const int nodes = 1 + *std::max_element(node_of_rank.begin(), node_of_rank.end());
  std::vector<std::vector<int>> ranks_of(static_cast<size_t>(nodes));
  for (size_t r = 0; r < node_of_rank.size(); ++r)
    ranks_of[static_cast<size_t>(node_of_rank[r])].push_back(static_cast<int>(r));
  plan.node_ranks = ranks_of;
  if (nodes == 1) return plan;
  auto buddy_of = [&](int r) {
    const int node = node_of_rank[static_cast<size_t>(r)];
    const auto& mine = ranks_of[static_cast<size_t>(node)];
    const size_t local = static_cast<size_t>(std::find(mine.begin(), mine.end(), r) - mine.begin());
    const auto& next = ranks_of[static_cast<size_t>((node + 1) % nodes)];
    return next[local % next.size()];
  };
  plan.buddy = buddy_of(rank);
  for (size_t r = 0; r < node_of_rank.size(); ++r)
    if (buddy_of(static_cast<int>(r)) == rank) plan.senders.push_back(static_cast<int>(r));
  return plan;
}

std::map<std::pair<int, int>, int> deal_memory_shards(const MemoryCopyPlan& plan,
                                                      const std::map<int, std::vector<int>>& shard_nodes) {
  std::map<std::pair<int, int>, int> keeper;
  std::vector<size_t> dealt(plan.node_ranks.size(), 0);
  for (const auto& [shard, nodes] : shard_nodes)
    for (const int node : nodes) {
      const std::vector<int>& ranks = plan.node_ranks[static_cast<size_t>(node)];
      keeper[{node, shard}] = ranks[dealt[static_cast<size_t>(node)]++ % ranks.size()];
    }
  return keeper;
}

MemoryCopies::MemoryCopies(MemoryCopyPlan plan, Trainer& trainer, PeerLink& link, const std::string& save_token)
    : plan_(std::move(plan)),
      link_(link),
      save_token_(save_token),
      checkpoint_(plan_.node_dir, trainer, plan_.rank, [this] {
        SaverOptions options;
        options.save_token = save_token_;
        options.write_instead = [this](int64_t step, std::span<const TensorSlice> staged,
                                       const std::optional<CommitSpec>& commit) { exchange(step, staged, commit); };
        return options;
      }()) {
  std::vector<int> peers = plan_.senders;
  if (plan_.buddy >= 0) peers.push_back(plan_.buddy);
  link_.connect(peers);
}

MemoryCopies::~MemoryCopies() {
  // A copy still in flight belongs to a run that is failing (a finished one waited for its
  // copies): it must not hold the rank's exit for the timeout of a send to a dead peer.
  link_.abort();
}

std::chrono::nanoseconds MemoryCopies::save(double last_lr) { return checkpoint_.save(last_lr); }

void MemoryCopies::exchange(int64_t step, std::span<const TensorSlice> staged,
                            const std::optional<CommitSpec>& commit) {
  // The node keeps this step and the one before. Each file of the step before that is
  // overwritten by the same rank's new copy (a tmpfs reuses its pages); what is left of it
  // goes at the next copy, once every rank of the node has surely taken its file.
  const auto started = std::chrono::steady_clock::now();
  const std::optional<int64_t> recycled = copied_.size() == 2 ? std::optional<int64_t>(copied_.front()) : std::nullopt;
  if (copied_.size() == 2) copied_.erase(copied_.begin());
  copied_.push_back(step);
  encode_memory_shard({step, plan_.rank, plan_.world}, save_token_, staged, commit ? &commit->metadata : nullptr,
                      encoded_);
  store_memory_shard(plan_.node_dir, encoded_, recycled);
  if (plan_.buddy >= 0) {
    // The send waits for the buddy to take it while this thread receives the senders' copies:
    // with two nodes a rank's buddy is also its sender.
    std::exception_ptr send_error;
    std::thread sending([&] {
      try {
        link_.send(plan_.buddy, save_tag(step), encoded_);
      } catch (...) {
        send_error = std::current_exception();
      }
    });
    try {
      received_.resize(plan_.senders.size());
      for (size_t i = 0; i < plan_.senders.size(); ++i) {
        link_.receive(plan_.senders[i], save_tag(step), received_[i]);
        store_memory_shard(plan_.node_dir, received_[i], recycled);
      }
    } catch (...) {
      link_.abort();  // the send may wait for a buddy that died too: this copy failed already
      sending.join();
      throw;
    }
    sending.join();
    if (send_error) std::rethrow_exception(send_error);
  }
  if (plan_.leads_node() && recycled) remove_memory_steps_before(plan_.node_dir, *recycled);
  longest_background_ =
      std::max<std::chrono::nanoseconds>(longest_background_, std::chrono::steady_clock::now() - started);
}

void MemoryCopies::remove_node_copies() {
  checkpoint_.wait();
  if (!plan_.leads_node()) return;
  std::error_code ec;
  fs::remove_all(plan_.node_dir, ec);
  fs::remove(plan_.node_dir.parent_path(), ec);  // the job's directory, once its last node's copies are gone
}

namespace {

// Bytes of the files under `dir` (none when it does not exist).
int64_t bytes_under(const fs::path& dir) {
  int64_t bytes = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) bytes += static_cast<int64_t>(it->file_size(ec));
  return bytes;
}

// The room for new files on the file system `dir` is on (or would be, once created).
int64_t available_bytes(fs::path dir) {
  std::error_code ec;
  while (!fs::exists(dir, ec) && dir.has_relative_path()) dir = dir.parent_path();
  const fs::space_info space = fs::space(dir, ec);
  if (ec) throw ConfigError("checkpoint.memory_dir " + dir.string() + ": " + ec.message());
  // all_gather_integers is exact below 2^43 bytes (8 TiB); a tmpfs is smaller.
  return static_cast<int64_t>(std::min<std::uintmax_t>(space.available, std::uintmax_t{1} << 42));
}

}  // namespace

void check_memory_room(const MemoryCopyPlan& plan, Backend& backend, Communicator& world, int64_t shard_bytes) {
  // Each rank keeps two steps of its own shard and of each sender's; a node's ranks together.
  const std::vector<int64_t> shards = all_gather_integers(backend, world, shard_bytes);
  int64_t kept = shards[static_cast<size_t>(plan.rank)];
  for (int s : plan.senders) kept += shards[static_cast<size_t>(s)];
  const std::vector<int64_t> node_and_kept = all_gather_integers(backend, world, {plan.node, 2 * kept});
  int64_t need = 0;
  for (size_t r = 0; r < node_and_kept.size(); r += 2)
    if (node_and_kept[r] == plan.node) need += node_and_kept[r + 1];
  std::vector<int64_t> room_and_need = {-1, -1};
  if (plan.leads_node()) room_and_need = {available_bytes(plan.node_dir) + bytes_under(plan.node_dir), need};
  const std::vector<int64_t> nodes = all_gather_integers(backend, world, room_and_need);
  std::string short_of;
  int short_nodes = 0;
  for (size_t r = 0; r < nodes.size(); r += 2) {
    if (nodes[r] < 0 || nodes[r] >= nodes[r + 1]) continue;
    if (short_nodes++ == 0)
      short_of = fmt::format("{:.1f} MiB free on the node of rank {}, where the memory copies need {:.1f} MiB",
                             in_mib(nodes[r]), r / 2, in_mib(nodes[r + 1]));
  }
  if (short_nodes == 0) return;
  throw ConfigError(fmt::format(
      "checkpoint.memory_dir {} has {}{} (this step's and the one before's shards of the node's ranks and of the "
      "ranks whose copies they keep); give it a tmpfs with room (a larger /dev/shm, or another directory in "
      "memory), or train without copies (checkpoint.memory_interval = 0)",
      plan.node_dir.parent_path().parent_path().string(), short_of,
      short_nodes > 1 ? fmt::format(", and {} more node(s) lack room", short_nodes - 1) : ""));
}

}  // namespace axonn
