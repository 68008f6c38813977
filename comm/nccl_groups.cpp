#include "comm/nccl_groups.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "comm/cuda_check.hpp"
#include "comm/exchange_blob.hpp"

namespace axonn {
namespace {

using clock_type = std::chrono::steady_clock;

// Key under which a group's leader publishes the group's id (the groups of one axis are
// disjoint, so name and leader identify a group).
std::string id_key(const GroupSpec& group) { return group.name + "/" + std::to_string(group.members.front()); }

// NCCL keeps the commName pointer for the communicator's lifetime (its logs and profiler
// name the communicator by it), so the names live as long as the process.
const char* lasting_name(const std::string& name) {
  static std::mutex mu;
  static std::set<std::string> names;
  std::lock_guard lock(mu);
  return names.insert("axonn:" + name).first->c_str();
}

void abort_all(std::vector<ncclComm_t>& comms) {
  for (ncclComm_t& c : comms) {
    if (c) (void)ncclCommAbort(c);
    c = nullptr;
  }
}

std::string group_text(const GroupSpec& group) {
  return "group '" + group.name + "' (world ranks " + format_ranks(group.members) + ")";
}

}  // namespace

std::vector<ncclComm_t> connect_nccl_groups(Exchange& exchange, const std::vector<GroupSpec>& groups,
                                            std::chrono::milliseconds timeout, const std::string& key) {
  const int me = exchange.rank();
  std::vector<int> group_ranks;
  BlobPairs mine;
  for (const auto& group : groups) {
    group_ranks.push_back(group_rank_of(group, me));
    if (group.members.front() == me) {
      ncclUniqueId id;
      AXONN_CUDA_CHECK(ncclGetUniqueId(&id));
      mine[id_key(group)] = std::vector<char>(id.internal, id.internal + sizeof id.internal);
    }
  }

  // One put per group leader, one fence for every group, the same on every rank.
  const std::string blob_key = "axonn.nccl." + key;
  if (!mine.empty()) exchange.put(blob_key, pack_pairs(mine));
  exchange.fence();

  std::vector<ncclUniqueId> ids(groups.size());
  std::map<int, BlobPairs> published;  // by leader, fetched once
  for (size_t g = 0; g < groups.size(); ++g) {
    const int leader = groups[g].members.front();
    auto [slot, fresh] = published.try_emplace(leader);
    if (fresh) slot->second = leader == me ? mine : unpack_pairs(exchange.get(leader, blob_key));
    auto it = slot->second.find(id_key(groups[g]));
    if (it == slot->second.end() || it->second.size() != sizeof(ncclUniqueId))
      throw CommError("bootstrap: rank " + std::to_string(leader) + " published no NCCL id for " +
                      group_text(groups[g]) + "; every rank must build the same groups");
    std::memcpy(ids[g].internal, it->second.data(), sizeof ids[g].internal);
  }

  // All of this rank's communicators in one group call: NCCL connects them concurrently, so
  // ranks that list their groups in different orders cannot block each other.
  std::vector<ncclComm_t> comms(groups.size(), nullptr);
  AXONN_CUDA_CHECK(ncclGroupStart());
  ncclResult_t started = ncclSuccess;
  size_t failed_group = 0;
  for (size_t g = 0; g < groups.size() && started == ncclSuccess; ++g) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = lasting_name(groups[g].name);
    const ncclResult_t r =
        ncclCommInitRankConfig(&comms[g], static_cast<int>(groups[g].members.size()), ids[g], group_ranks[g], &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      started = r;
      failed_group = g;
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (started != ncclSuccess || (ended != ncclSuccess && ended != ncclInProgress)) {
    const std::string what = started != ncclSuccess ? "ncclCommInitRankConfig for " + group_text(groups[failed_group]) +
                                                          ": " + cuda_error_text(started)
                                                    : "ncclGroupEnd: " + cuda_error_text(ended);
    abort_all(comms);
    throw CommError("creating NCCL communicators failed on " + cuda_check_where() + ": " + what);
  }

  // Poll each until ready; NCCL connects them all meanwhile, so one deadline covers all.
  const auto deadline = clock_type::now() + timeout;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int polls = 0;; ++polls) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t r = ncclCommGetAsyncError(comms[g], &state);
      if (r == ncclSuccess && state == ncclSuccess) break;
      if (r != ncclSuccess || state != ncclInProgress) {
        const std::string error = cuda_error_text(r != ncclSuccess ? r : state);
        abort_all(comms);
        throw CommError("connecting NCCL " + group_text(groups[g]) + " failed on " + cuda_check_where() + ": " + error);
      }
      if (clock_type::now() > deadline) {
        abort_all(comms);
        throw CommError("NCCL " + group_text(groups[g]) + " did not connect within " + std::to_string(timeout.count()) +
                        " ms on " + cuda_check_where() +
                        ": a member did not create its communicator (it died, stalled, or builds different groups)");
      }
      if (polls < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return comms;
}

}  // namespace axonn
