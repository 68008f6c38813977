#include "trainer/train/memory_copies.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <system_error>
#include <thread>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/memory_shard.hpp"
#include "checkpoint/memory_steps.hpp"
#include "checkpoint/step_dir.hpp"
#include "config/config_error.hpp"
#include "core/number_text.hpp"
#include "trainer/train/host_exchange.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

// Peer link tags: a save's messages carry its step (one save is in flight at a time), a
// restore's the file's index with the top bit set.
constexpr uint32_t kRestoreTag = 0x80000000u;
uint32_t save_tag(int64_t step) { return static_cast<uint32_t>(step) & ~kRestoreTag; }

constexpr const char* kRestoreDirName = "restore";

// One node's inventory as integers for an all-gather: per step, [step, world, shards, ranks...].
std::vector<int64_t> encode(const std::vector<MemoryStep>& steps) {
  std::vector<int64_t> out;
  for (const MemoryStep& s : steps) {
    out.push_back(s.step);
    out.push_back(s.world);
    out.push_back(static_cast<int64_t>(s.shards.size()));
    out.insert(out.end(), s.shards.begin(), s.shards.end());
  }
  return out;
}

// Who holds each shard of a step: the leaders (ranks) whose node has it.
struct StepHolders {
  int world = 0;
  std::map<int, std::vector<int>> shard_holders;  // shard rank -> leaders, ascending
  bool whole() const {
    if (world <= 0) return false;
    for (int r = 0; r < world; ++r)
      if (shard_holders.count(r) == 0) return false;
    return true;
  }
};

std::map<int64_t, StepHolders> decode(const std::vector<int64_t>& gathered, size_t per_rank) {
  std::map<int64_t, StepHolders> steps;
  for (size_t r = 0; r * per_rank < gathered.size(); ++r) {
    const int64_t* at = gathered.data() + r * per_rank;
    const int64_t* end = at + per_rank;
    while (at + 3 <= end && at[0] >= 0) {
      StepHolders& s = steps[at[0]];
      s.world = std::max(s.world, static_cast<int>(at[1]));
      const int64_t shards = at[2];
      for (int64_t i = 0; i < shards && at + 3 + i < end; ++i)
        s.shard_holders[static_cast<int>(at[3 + i])].push_back(static_cast<int>(r));
      at += 3 + shards;
    }
  }
  return steps;
}

// The ranks of the job that say yes, "1, 3"; empty when none does.
std::string ranks_saying(Backend& backend, Communicator& world, bool mine) {
  const std::vector<int64_t> all = all_gather_integers(backend, world, mine ? 1 : 0);
  std::string list;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != 0) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return list;
}

}  // namespace

fs::path memory_job_dir(const fs::path& memory_dir, const std::string& job, const std::string& checkpoint_dir) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a: a name, not a checksum
  for (const char c : checkpoint_dir) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return memory_dir / fmt::format("axonn-{}-{:08x}", job, static_cast<uint32_t>(hash ^ (hash >> 32)));
}

MemoryCopyPlan plan_memory_copies(std::span<const int> node_of_rank, int rank, fs::path node_dir, int interval) {
  MemoryCopyPlan plan;
  plan.node_dir = std::move(node_dir);
  plan.rank = rank;
  plan.interval = interval;
  plan.world = static_cast<int>(node_of_rank.size());
  plan.node = node_of_rank[static_cast<size_t>(rank)];
  const int nodes = 1 + *std::max_element(node_of_rank.begin(), node_of_rank.end());
  std::vector<std::vector<int>> ranks_of(static_cast<size_t>(nodes));
  for (size_t r = 0; r < node_of_rank.size(); ++r)
    ranks_of[static_cast<size_t>(node_of_rank[r])].push_back(static_cast<int>(r));
  for (const auto& ranks : ranks_of) plan.leaders.push_back(ranks.front());
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
      }()) {}

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
  const int64_t recycled = step - 2 * static_cast<int64_t>(plan_.interval);
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
  if (plan_.leads_node()) remove_memory_steps_before(plan_.node_dir, recycled);
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
  if (short_nodes == 0) {
    // A restore gathers the whole step on every node, as memory shards and as the checkpoint
    // step written from them: a node without that room makes a restart load the disk's.
    int64_t whole = 0;
    for (int64_t b : shards) whole += b;
    int64_t least = -1;
    for (size_t r = 0; r < nodes.size(); r += 2)
      if (nodes[r] >= 0 && (least < 0 || nodes[r] < least)) least = nodes[r];
    if (plan.rank == 0 && least < 2 * whole)
      spdlog::warn(
          "checkpoint: memory copies: a restore needs {:.1f} MiB in every node's checkpoint.memory_dir (the whole step "
          "twice: its shards and the checkpoint step written from them), and a node has {:.1f} MiB: a restart would "
          "load the disk checkpoint instead (give checkpoint.memory_dir more room)",
          in_mib(2 * whole), in_mib(least));
    return;
  }
  throw ConfigError(fmt::format(
      "checkpoint.memory_dir {} has {}{} (this step's and the one before's shards of the node's ranks and of the "
      "ranks whose copies they keep); give it a tmpfs with room (a larger /dev/shm, or another directory in "
      "memory), or train without copies (checkpoint.memory_interval = 0)",
      plan.node_dir.parent_path().parent_path().string(), short_of,
      short_nodes > 1 ? fmt::format(", and {} more node(s) lack room", short_nodes - 1) : ""));
}

namespace {

// Which steps each node holds, as every rank sees it (a node's lowest rank answers for it).
std::map<int64_t, StepHolders> gather_holdings(const MemoryCopyPlan& plan, Backend& backend, Communicator& world) {
  const std::vector<int64_t> mine = plan.leads_node() ? encode(memory_steps(plan.node_dir)) : std::vector<int64_t>{};
  const std::vector<int64_t> sizes = all_gather_integers(backend, world, static_cast<int64_t>(mine.size()));
  const size_t per_rank = static_cast<size_t>(std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end())));
  std::vector<int64_t> padded = mine;
  padded.resize(per_rank, -1);
  return decode(all_gather_integers(backend, world, padded), per_rank);
}

// A node's lowest rank: fetches the shards of `step` its node lacks, one at a time in the same
// order on every node, each from the lowest node that holds it; returns the bytes it sent. A
// holder that cannot read its file sends an empty message, and the receivers throw naming it.
int64_t fetch_missing_shards(const MemoryCopyPlan& plan, PeerLink& link, int64_t step, const StepHolders& files) {
  int64_t sent = 0;
  for (int r = 0; r < files.world; ++r) {
    const std::vector<int>& holders = files.shard_holders.at(r);
    const uint32_t tag = kRestoreTag | static_cast<uint32_t>(r);
    const bool here = std::find(holders.begin(), holders.end(), plan.rank) != holders.end();
    if (holders.front() == plan.rank) {
      std::string copy;  // the file's bytes (read_text_file reads in binary mode)
      std::exception_ptr unreadable;
      try {
        copy = read_text_file(memory_shard_path(plan.node_dir, step, r));
      } catch (const CheckpointError&) {
        unreadable = std::current_exception();
      }
      for (int leader : plan.leaders)
        if (std::find(holders.begin(), holders.end(), leader) == holders.end()) {
          link.send(leader, tag, copy);
          sent += static_cast<int64_t>(copy.size());
        }
      if (unreadable) std::rethrow_exception(unreadable);
    } else if (!here) {
      const std::vector<char> copy = link.receive(holders.front(), tag);
      if (copy.empty())
        throw CheckpointError("", "memory copy",
                              "rank " + std::to_string(holders.front()) + " could not read its copy of rank " +
                                  std::to_string(r) + "'s shard of " + step_dir_name(step));
      store_memory_shard(plan.node_dir, copy);
    }
  }
  return sent;
}

// A node's lowest rank, once the ranks have decided: the node keeps `kept` only (nothing when
// nullopt), so no shard of the failed attempt's later steps is mixed into this run's.
void keep_only(const MemoryCopyPlan& plan, std::optional<int64_t> kept) {
  if (!plan.leads_node()) return;
  std::error_code ec;
  fs::remove_all(plan.node_dir / kRestoreDirName, ec);
  for (const MemoryStep& s : memory_steps(plan.node_dir))
    if (!kept || s.step != *kept) fs::remove_all(tmp_step_path(plan.node_dir, s.step), ec);
}

}  // namespace

MemoryRestore restore_from_memory(const MemoryCopyPlan& plan, PeerLink& link, Backend& backend, Communicator& world,
                                  Trainer& trainer, int64_t disk_step, bool data_changed) {
  MemoryRestore result;
  // 1. The newest step the nodes hold whole, if newer than the disk's.
  const std::map<int64_t, StepHolders> held = gather_holdings(plan, backend, world);
  if (held.empty()) return result;  // a first start: nothing to say
  const auto newest = std::find_if(held.rbegin(), held.rend(), [](const auto& s) { return s.second.whole(); });
  if (newest == held.rend() || newest->first <= disk_step) {
    result.why = newest == held.rend() ? "no step is whole in the nodes' memory"
                                       : "the newest step whole in memory, " + step_dir_name(newest->first) +
                                             ", is not newer than the disk's " + step_dir_name(disk_step);
    keep_only(plan, std::nullopt);
    return result;
  }
  const int64_t step = newest->first;

  // 2. Every node makes the step whole and writes it as a checkpoint step, its shards verified
  //    first: a load that failed half-way would leave the trainer's weights mixed.
  bool failed = false;
  if (plan.leads_node()) {
    try {
      result.bytes_moved = fetch_missing_shards(plan, link, step, newest->second);
      if (std::getenv("AXONN_TEST_CORRUPT_MEMORY_COPY") != nullptr && plan.node == 0)
        flip_last_bit(memory_shard_path(plan.node_dir, step, 0));
      commit_memory_step(plan.node_dir, step, plan.node_dir / kRestoreDirName);
    } catch (const std::exception& e) {
      failed = true;
      spdlog::warn("memory copy: rank {}: {}", plan.rank, e.what());
    }
  }
  int64_t moved = 0;
  for (int64_t b : all_gather_integers(backend, world, result.bytes_moved)) moved += b;
  result.bytes_moved = moved;
  if (const std::string ranks = ranks_saying(backend, world, failed); !ranks.empty()) {
    result.why = "the memory copy of " + step_dir_name(step) + " could not be used (rank(s) " + ranks +
                 " said why above); loading the disk checkpoint instead";
    keep_only(plan, std::nullopt);
    return result;
  }

  // 3. Every rank loads its part of the step its node committed, as from a disk checkpoint.
  TrainingCheckpoint restore(plan.node_dir / kRestoreDirName, trainer, plan.rank, SaverOptions{});
  restore.allow_data_change(data_changed);
  bool other_run = false;  // refused before any tensor was read: the trainer is untouched
  try {
    restore.load(false, step);
  } catch (const RequestMismatch& e) {
    other_run = true;
    spdlog::warn("memory copy: rank {}: {}", plan.rank, e.what());
  } catch (const CheckpointError& e) {
    failed = true;
    spdlog::warn("memory copy: rank {}: {}", plan.rank, e.what());
  }
  const bool any_failed = !ranks_saying(backend, world, failed).empty();
  const bool any_other = !ranks_saying(backend, world, other_run).empty();
  keep_only(plan, any_failed || any_other ? std::nullopt : std::optional<int64_t>(step));
  if (any_failed && disk_step == 0)
    throw CheckpointError((plan.node_dir / kRestoreDirName).string(), "resume",
                          "loading the memory copy of " + step_dir_name(step) +
                              " failed after it verified, and there is no disk checkpoint to load instead: start "
                              "the job again (it starts from the initial weights)");
  if (any_failed || any_other) {
    result.why = "the memory copy of " + step_dir_name(step) + (any_failed ? " failed to load" : " is of another run") +
                 "; loading the disk checkpoint instead";
    return result;
  }
  result.step = step;
  result.why =
      fmt::format("loaded {} from the nodes' memory ({:.2f} MiB moved between nodes), newer than the disk's {}",
                  step_dir_name(step), in_mib(moved), disk_step > 0 ? step_dir_name(disk_step) : "none");
  return result;
}

}  // namespace axonn
