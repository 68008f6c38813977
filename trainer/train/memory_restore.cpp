#include "trainer/train/memory_restore.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <string_view>
#include <system_error>
#include <thread>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/memory_pieces.hpp"
#include "checkpoint/memory_pieces_read.hpp"
#include "checkpoint/memory_shard.hpp"
#include "checkpoint/memory_steps.hpp"
#include "checkpoint/raw_read.hpp"
#include "checkpoint/step_dir.hpp"
#include "core/number_text.hpp"
#include "trainer/train/host_exchange.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

// Peer link tags of a restore's requests for pieces and their answers: the top bit set, apart
// from the copies' (memory_copies.cpp: a save's step).
constexpr uint32_t kPieceRequestTag = 0x80000001u, kPieceAnswerTag = 0x80000002u;

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

// Who holds each shard of a step: the nodes that have it.
struct StepHolders {
  int world = 0;
  std::map<int, std::vector<int>> shard_holders;  // shard rank -> nodes, ascending
  bool whole() const {
    if (world <= 0) return false;
    for (int r = 0; r < world; ++r)
      if (shard_holders.count(r) == 0) return false;
    return true;
  }
};

// Every node's inventory (encode's lists, by rank; empty but on a node's lowest rank) as
// steps and who holds each shard.
std::map<int64_t, StepHolders> decode(const std::vector<std::vector<int64_t>>& lists, const MemoryCopyPlan& plan) {
  std::map<int64_t, StepHolders> steps;
  for (int node = 0; node < static_cast<int>(plan.node_ranks.size()); ++node) {
    const std::vector<int64_t>& list = lists[static_cast<size_t>(plan.leader(node))];
    const int64_t* at = list.data();
    const int64_t* end = at + list.size();
    while (at + 3 <= end) {
      StepHolders& s = steps[at[0]];
      s.world = std::max(s.world, static_cast<int>(at[1]));
      const int64_t shards = at[2];
      for (int64_t i = 0; i < shards && at + 3 + i < end; ++i)
        s.shard_holders[static_cast<int>(at[3 + i])].push_back(node);
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

// Which steps each node holds, as every rank sees it (a node's lowest rank answers for it).
std::map<int64_t, StepHolders> gather_holdings(const MemoryCopyPlan& plan, Backend& backend, Communicator& world) {
  const std::vector<int64_t> mine = plan.leads_node() ? encode(memory_steps(plan.node_dir)) : std::vector<int64_t>{};
  return decode(all_gather_integer_lists(backend, world, mine), plan);
}

// A node's lowest rank, once the ranks have decided: the node keeps `kept` only (nothing when
// nullopt), so no shard of the failed attempt's later steps is mixed into this run's.
void keep_only(const MemoryCopyPlan& plan, std::optional<int64_t> kept) {
  if (!plan.leads_node()) return;
  std::error_code ec;
  for (const MemoryStep& s : memory_steps(plan.node_dir))
    if (!kept || s.step != *kept) fs::remove_all(tmp_step_path(plan.node_dir, s.step), ec);
}

// The fault a test injects (AXONN_TEST_CORRUPT_MEMORY_COPY, docs/environment.md): "checksum"
// flips a bit of rank 0's shard on node 0 before it is verified; "after-verify" cuts a byte off
// the last rank's shard there once it verified, so that the pieces of it are the last to fail,
// after the others were written. Empty: none.
std::string_view test_fault() {
  const char* fault = std::getenv("AXONN_TEST_CORRUPT_MEMORY_COPY");
  return fault != nullptr ? fault : "";
}

// Thrown by every rank at once, after they agreed, when the memory copy is not loaded: the disk
// checkpoint is loaded instead (over any pieces already written: PieceRestore's step 3).
struct NotRestored {
  std::string why;
};

// Throws NotRestored on every rank when any rank says `failed` (it logged why).
void agree_or_give_up(Backend& backend, Communicator& world, bool failed, const std::string& where,
                      const std::string& what) {
  if (const std::string ranks = ranks_saying(backend, world, failed); !ranks.empty())
    throw NotRestored{where + " could not be used (" + what + ": rank(s) " + ranks +
                      " said why above); loading the disk checkpoint instead"};
}

// The pieces of one step, moved from the nodes that hold its shards to the ranks that read
// them (checkpoint/memory_pieces.hpp). Collective over the job; a fill for
// TrainingCheckpoint::load_from.
class PieceRestore {
 public:
  PieceRestore(const MemoryCopyPlan& plan, PeerLink& link, Backend& backend, Communicator& world, int64_t step,
               const StepHolders& holders, std::string model_config)
      : plan_(plan),
        link_(link),
        backend_(backend),
        world_(world),
        step_(step),
        holders_(holders),
        keeper_(deal_memory_shards(plan, holders.shard_holders)),
        model_config_(std::move(model_config)) {}

  LoadResult operator()(std::span<const SliceRead> reads) {
    const std::string where = "the memory copy of " + step_dir_name(step_);
    // 1. The ranks of every node verify the shards their node holds (whole, once), each its
    //    share (deal_memory_shards).
    std::string tables;
    bool failed = false;
    try {
      tables = verify_held_shards();
    } catch (const CheckpointError& e) {
      failed = true;
      spdlog::warn("memory copy: rank {}: {}", plan_.rank, e.what());
    }
    agree_or_give_up(backend_, world_, failed, where, "it failed its checks");

    // 2. Every rank learns every shard's table and plans the pieces its slices take.
    const std::vector<std::string> blobs = all_gather_bytes(backend_, world_, tables);
    std::vector<MemoryShard> table(static_cast<size_t>(holders_.world));
    table_bytes_.assign(table.size(), std::string());
    std::vector<MemoryPiece> pieces;
    bool other_run = false;
    try {
      for (const std::string& blob : blobs) unpack_tables(blob, table);
      const std::optional<Metadata>& metadata = table.at(0).metadata;
      if (!metadata) throw FormatError(where, "memory copy restore", "rank 0's shard of it carries no metadata");
      if (metadata->model_config != model_config_)
        throw RequestMismatch(where, "resume",
                              where + " is of another model (" + metadata->model_config + ") than the job's [model] (" +
                                  model_config_ + ")");
      pieces = plan_memory_pieces(table, reads, where);
    } catch (const RequestMismatch& e) {
      other_run = true;
      spdlog::warn("memory copy: rank {}: {}", plan_.rank, e.what());
    } catch (const CheckpointError& e) {
      failed = true;
      spdlog::warn("memory copy: rank {}: {}", plan_.rank, e.what());
    }
    agree_or_give_up(backend_, world_, other_run, where, "it is of another model");
    agree_or_give_up(backend_, world_, failed, where, "its shards do not make the tensors whole");

    // 3. Each rank reads the pieces its node holds in place and asks the other nodes for the
    //    rest, the ranks that verified them answering on a thread of their own; straight into
    //    the trainer's buffers (the pieces cover every element exactly once: plan_memory_pieces).
    //    A failure from here on leaves them partly written, and what is loaded instead writes
    //    every value again: the disk checkpoint's slices are these, and with none the initial
    //    weights and zero moments are drawn over them.
    std::vector<float*> into;
    for (const SliceRead& read : reads) into.push_back(read.data);
    received_ = exchange(pieces, table, reads, into, failed);
    agree_or_give_up(backend_, world_, failed, where, "its pieces did not arrive whole");
    LoadResult result;
    result.step = step_;
    result.step_dir = plan_.node_dir / step_dir_name(step_);
    result.metadata = *table[0].metadata;
    for (const MemoryPiece& p : pieces) result.bytes_wanted += element_count(p.region) * 4;
    result.bytes_read = result.bytes_wanted;
    return result;
  }

  // Bytes this rank received from other nodes (after operator()).
  int64_t received() const { return received_; }

 private:
  // The shards of the step this node holds that this rank keeps (deal_memory_shards), each
  // verified where it lies (mapped, never copied); returns the tables of those its node serves
  // to the others (it is the first holder): [u64 rank, u64 length, bytes]...
  std::string verify_held_shards() const {
    std::string tables;
    for (const auto& [r, nodes] : holders_.shard_holders) {
      if (!keeps(plan_.node, r)) continue;
      const fs::path path = memory_shard_path(plan_.node_dir, step_, r);
      const std::string_view fault = test_fault();
      if (fault == "checksum" && plan_.node == 0 && r == 0) flip_last_bit(path);
      size_t table_bytes = 0;
      std::string table;
      MemoryShardHeader header;
      {  // mapped while it is verified
        const MappedRawFile file(path);
        header = verify_memory_shard(file.bytes(), path.string(), &table_bytes).header;
        table.assign(file.bytes().data(), table_bytes);
      }
      if (fault == "after-verify" && plan_.node == 0 && r == holders_.world - 1)
        fs::resize_file(path, fs::file_size(path) - 1);
      if (header.step != step_ || header.rank != r || header.world != holders_.world)
        throw FormatError(path.string(), "memory copy restore",
                          path.string() + " is not rank " + std::to_string(r) + "'s shard of " + step_dir_name(step_) +
                              " of " + std::to_string(holders_.world) + " ranks");
      if (nodes.front() != plan_.node) continue;
      for (const uint64_t v : {static_cast<uint64_t>(r), static_cast<uint64_t>(table_bytes)})
        for (int i = 0; i < 8; ++i) tables.push_back(static_cast<char>(v >> (8 * i)));
      tables += table;
    }
    return tables;
  }

  void unpack_tables(const std::string& blob, std::vector<MemoryShard>& table) {
    auto u64_at = [&](size_t at) {
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(blob[at + i])) << (8 * i);
      return v;
    };
    for (size_t at = 0; at + 16 <= blob.size();) {
      const uint64_t r = u64_at(at), n = u64_at(at + 8);
      at += 16;
      const std::string name = memory_shard_path(plan_.node_dir, step_, static_cast<int>(r)).string();
      if (r >= table.size() || n > blob.size() - at)
        throw FormatError(name, "memory copy restore", "a shard table gathered for " + name + " is damaged");
      table[r] = decode_memory_shard_table(std::span(blob.data() + at, n), name);
      table_bytes_[r].assign(blob, at, n);
      at += n;
    }
  }

  // Whether this rank reads and serves `shard` on `node`.
  bool keeps(int node, int shard) const {
    const auto it = keeper_.find({node, shard});
    return it != keeper_.end() && it->second == plan_.rank;
  }

  // Who answers for a shard: its keeper on this node when the node holds it, else on the first
  // node that does.
  int server_of(int shard) const {
    const std::vector<int>& nodes = holders_.shard_holders.at(shard);
    const bool here = std::find(nodes.begin(), nodes.end(), plan_.node) != nodes.end();
    return keeper_.at({here ? plan_.node : nodes.front(), shard});
  }

  bool on_this_node(int rank) const {
    const std::vector<int>& mine = plan_.node_ranks[static_cast<size_t>(plan_.node)];
    return std::find(mine.begin(), mine.end(), rank) != mine.end();
  }

  // Moves the pieces; returns the bytes this rank received from other nodes. The pieces of the
  // shards this node holds are read in place from the node's files (verified by their keepers);
  // the others are asked for. Never throws for a bad piece: it sets `failed` and goes on, so
  // that no rank waits for a request that never comes; only a peer that died ends it early (the
  // peer link's error).
  int64_t exchange(std::span<const MemoryPiece> pieces, std::span<const MemoryShard> table,
                   std::span<const SliceRead> reads, std::span<float* const> into, bool& failed) {
    std::map<int, std::vector<MemoryPiece>> by_server, in_place;  // in_place: by shard
    for (const MemoryPiece& p : pieces) {
      const int server = server_of(p.shard);
      if (on_this_node(server))
        in_place[p.shard].push_back(p);
      else
        by_server[server].push_back(p);
    }
    // Every rank's servers, so each server knows whom it answers.
    std::vector<int64_t> mine;
    for (const auto& [server, unused] : by_server) mine.push_back(server);
    const std::vector<std::vector<int64_t>> servers = all_gather_integer_lists(backend_, world_, mine);
    std::vector<int> asking;
    for (size_t q = 0; q < servers.size(); ++q)
      if (static_cast<int>(q) != plan_.rank &&
          std::find(servers[q].begin(), servers[q].end(), plan_.rank) != servers[q].end())
        asking.push_back(static_cast<int>(q));
    std::vector<int> peers = asking;  // and the servers: the pairs both sides now name
    for (const int64_t server : mine) peers.push_back(static_cast<int>(server));
    link_.connect(peers);

    std::atomic<bool> serving_failed = false;
    std::exception_ptr link_error;
    std::thread serving;
    // The shards others ask this rank for: those it verified on the first node that holds them,
    // whose gathered tables are its own. Answered from their files.
    std::map<int, MemoryShardFile> served;
    if (!asking.empty()) {
      for (const auto& [r, nodes] : holders_.shard_holders) {
        if (nodes.front() != plan_.node || !keeps(plan_.node, r)) continue;
        try {
          served.emplace(r, MemoryShardFile(memory_shard_path(plan_.node_dir, step_, r),
                                            table_bytes_[static_cast<size_t>(r)], table[static_cast<size_t>(r)]));
        } catch (const CheckpointError& e) {  // its pieces are answered with nothing, which fails the asker
          serving_failed = true;
          spdlog::warn("memory copy: rank {}: {}", plan_.rank, e.what());
        }
      }
      const auto file_of = [&served](int shard) {
        const auto it = served.find(shard);
        return it != served.end() ? &it->second : nullptr;
      };
      serving = std::thread([&, file_of] {
        try {
          for (int q : asking) {
            const std::vector<char> request = link_.receive(q, kPieceRequestTag);
            std::vector<int64_t> words(request.size() / sizeof(int64_t));
            std::memcpy(words.data(), request.data(), words.size() * sizeof(int64_t));
            std::vector<char> answer;
            try {
              answer = answer_piece_request_from_files(words, file_of, "rank " + std::to_string(q));
            } catch (const CheckpointError& e) {
              serving_failed = true;  // the empty answer fails the requester's size check too
              spdlog::warn("memory copy: rank {}: {}", plan_.rank, e.what());
            }
            link_.send(q, kPieceAnswerTag, answer);
          }
        } catch (...) {
          link_error = std::current_exception();
        }
      });
    }
    int64_t received = 0;
    std::exception_ptr asking_error;
    for (const auto& [shard, wanted] : in_place) {
      try {
        const MemoryShardFile file(memory_shard_path(plan_.node_dir, step_, shard),
                                   table_bytes_[static_cast<size_t>(shard)], table[static_cast<size_t>(shard)]);
        file.read_pieces(wanted, reads, into);
      } catch (const CheckpointError& e) {
        failed = true;
        spdlog::warn("memory copy: rank {}: {}", plan_.rank, e.what());
      }
    }
    try {
      for (const auto& [server, wanted] : by_server) {
        const std::vector<int64_t> words = encode_piece_request(wanted);
        link_.send(server, kPieceRequestTag,
                   std::span(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(int64_t)));
        const std::vector<char> answer = link_.receive(server, kPieceAnswerTag);
        received += static_cast<int64_t>(answer.size());
        try {
          place_piece_answer(wanted, answer, reads, into, "rank " + std::to_string(server));
        } catch (const CheckpointError& e) {
          failed = true;
          spdlog::warn("memory copy: rank {}: {}", plan_.rank, e.what());
        }
      }
    } catch (...) {
      asking_error = std::current_exception();
      link_.abort();  // a peer died: the serving thread must not wait for it either
    }
    if (serving.joinable()) serving.join();
    if (asking_error) std::rethrow_exception(asking_error);
    if (link_error) std::rethrow_exception(link_error);
    failed = failed || serving_failed;
    return received;
  }

  const MemoryCopyPlan& plan_;
  PeerLink& link_;
  Backend& backend_;
  Communicator& world_;
  int64_t step_;
  const StepHolders& holders_;
  std::map<std::pair<int, int>, int> keeper_;  // (node, shard) -> the rank there that reads and serves it
  std::string model_config_;
  std::vector<std::string> table_bytes_;  // [shard rank] its header and slice table, as gathered
  int64_t received_ = 0;
};

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

  // 2. Every rank takes the pieces of that step its slices need from the nodes that hold them.
  TrainingCheckpoint restore(plan.node_dir, trainer, plan.rank, SaverOptions{});
  restore.allow_data_change(data_changed);
  PieceRestore pieces(plan, link, backend, world, step, newest->second, model_config_text(trainer.job().model));
  bool failed = false;
  try {
    restore.load_from(std::ref(pieces));
  } catch (const NotRestored& e) {  // every rank
    result.why = e.why;
    keep_only(plan, std::nullopt);
    return result;
  } catch (const CheckpointError& e) {  // after the slices were filled: the step's metadata
    failed = true;
    spdlog::warn("memory copy: rank {}: {}", plan.rank, e.what());
  }
  const bool any_failed = !ranks_saying(backend, world, failed).empty();
  keep_only(plan, any_failed ? std::nullopt : std::optional<int64_t>(step));
  if (any_failed && disk_step == 0)
    throw CheckpointError(plan.node_dir.string(), "resume",
                          "loading the memory copy of " + step_dir_name(step) +
                              " failed after it verified, and there is no disk checkpoint to load instead: start "
                              "the job again (it starts from the initial weights)");
  if (any_failed) {
    result.why = "the memory copy of " + step_dir_name(step) + " failed to load; loading the disk checkpoint instead";
    return result;
  }
  int64_t moved = 0;
  for (int64_t b : all_gather_integers(backend, world, pieces.received())) moved += b;
  result.bytes_moved = moved;
  result.step = step;
  result.why =
      fmt::format("loaded {} from the nodes' memory ({:.2f} MiB moved between nodes), newer than the disk's {}",
                  step_dir_name(step), in_mib(moved), disk_step > 0 ? step_dir_name(disk_step) : "none");
  return result;
}

}  // namespace axonn
