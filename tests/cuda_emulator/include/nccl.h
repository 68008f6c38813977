#pragma once
// NCCL for ranks that are threads of one process (cuda_emulator_streams.hpp has the model):
// ncclCommInitRankConfig joins a clique by its unique id, non-blocking (the communicator is
// ncclInProgress until every rank has joined); a collective queues this rank's part on the
// given stream, and runs, in rank order, when every member's stream has reached its part.
// The k-th collective of each rank of a clique must be the same call (kind, count, type,
// root): a mismatch, which would hang or corrupt on GPUs, stops the emulator naming both.
// ncclSend/ncclRecv are matched as NCCL matches them: the k-th send from rank a to rank b
// with the k-th receive on b from a (same count and type, else the emulator stops naming
// both). Between ncclGroupStart and ncclGroupEnd they are collected, and ncclGroupEnd queues
// them as one item on each stream: every message of the group moves once both its sender's
// and its receiver's streams have reached their items, so a group's sends and receives wait
// for each other in no order (as NCCL's do), and the item completes when all have moved.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime_api.h"

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum ncclDataType_t { ncclFloat32 = 7, ncclBfloat16 = 9 };
enum ncclRedOp_t { ncclSum = 0 };
struct ncclUniqueId {
  char internal[128];
};
struct ncclConfig_t {
  int blocking = 1;
  const char* commName = nullptr;
};
#define NCCL_CONFIG_INITIALIZER ncclConfig_t{}

namespace cuda_emulator {

enum class CollectiveCall { all_reduce, all_gather, reduce_scatter, broadcast };

struct Collective {
  CollectiveCall call;
  size_t count;
  ncclDataType_t type;
  int root;
  std::vector<const void*> in;
  std::vector<void*> out;
  std::vector<bool> reached;  // the member's stream has reached its part
  bool done = false;
};

// One message of ncclSend/ncclRecv, filled in by whichever side issues first.
struct Transfer {
  const void* from = nullptr;
  void* to = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  bool sent = false, received = false;                    // the side has issued its call
  bool sender_reached = false, receiver_reached = false;  // its stream has reached the call
  bool done = false;
};
using TransferKey = std::tuple<int, int, uint64_t>;  // sender, receiver, k-th between them

struct Clique {
  int size = 0, joined = 0;
  bool aborted = false;
  std::string name;
  std::vector<uint64_t> issued;                         // collectives issued, per rank
  std::map<uint64_t, std::shared_ptr<Collective>> open;  // by sequence number
  std::map<std::pair<int, int>, uint64_t> sends, receives;     // issued, per (sender, receiver)
  std::map<TransferKey, std::shared_ptr<Transfer>> transfers;  // not moved yet
};

inline std::map<std::string, std::shared_ptr<Clique>>& cliques() {
  static std::map<std::string, std::shared_ptr<Clique>> all;
  return all;
}

inline const char* call_name(CollectiveCall c) {
  switch (c) {
    case CollectiveCall::all_reduce:
      return "all-reduce";
    case CollectiveCall::all_gather:
      return "all-gather";
    case CollectiveCall::reduce_scatter:
      return "reduce-scatter";
    case CollectiveCall::broadcast:
      return "broadcast";
  }
  return "?";
}

inline float load(const void* p, size_t i, ncclDataType_t t) {
  return t == ncclFloat32 ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
inline void store(void* p, size_t i, ncclDataType_t t, float v) {
  if (t == ncclFloat32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

// Every member's part is reached: read all inputs, then write all outputs (in-place calls).
inline void run_collective(Collective& c) {
  const size_t n = c.in.size(), count = c.count;
  std::vector<std::vector<float>> result(n);
  for (size_t r = 0; r < n; ++r) {
    std::vector<float>& out = result[r];
    switch (c.call) {
      case CollectiveCall::all_reduce:
        out.assign(count, 0.0f);
        for (size_t q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) out[i] += load(c.in[q], i, c.type);
        break;
      case CollectiveCall::all_gather:
        for (size_t q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) out.push_back(load(c.in[q], i, c.type));
        break;
      case CollectiveCall::reduce_scatter:
        out.assign(count, 0.0f);
        for (size_t q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) out[i] += load(c.in[q], r * count + i, c.type);
        break;
      case CollectiveCall::broadcast:
        for (size_t i = 0; i < count; ++i) out.push_back(load(c.in[static_cast<size_t>(c.root)], i, c.type));
        break;
    }
  }
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < result[r].size(); ++i) store(c.out[r], i, c.type, result[r][i]);
  c.done = true;
}

}  // namespace cuda_emulator

struct ncclComm {
  std::shared_ptr<cuda_emulator::Clique> clique;
  int rank;
};
using ncclComm_t = ncclComm*;

inline const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclInProgress:
      return "NCCL operation in progress";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInvalidUsage:
      return "invalid usage";
    default:
      return "emulated NCCL error";
  }
}
inline const char* ncclGetLastError(ncclComm_t) { return ""; }

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static uint64_t next = 0;
  std::lock_guard lock(cuda_emulator::queues().mutex);
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "emulated-nccl-%llu", static_cast<unsigned long long>(++next));
  return ncclSuccess;
}
namespace cuda_emulator {
inline int& group_depth();
inline void end_group();
}  // namespace cuda_emulator
inline ncclResult_t ncclGroupStart() {
  ++cuda_emulator::group_depth();
  return ncclSuccess;
}
// The outermost end queues the group's sends and receives, one item per stream.
inline ncclResult_t ncclGroupEnd() {
  if (cuda_emulator::group_depth() == 0) return ncclInvalidUsage;
  if (--cuda_emulator::group_depth() == 0) cuda_emulator::end_group();
  return ncclSuccess;
}

inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  std::lock_guard lock(cuda_emulator::queues().mutex);
  auto& clique = cuda_emulator::cliques()[std::string(id.internal)];
  if (!clique) {
    clique = std::make_shared<cuda_emulator::Clique>();
    clique->size = nranks;
    clique->issued.assign(static_cast<size_t>(nranks), 0);
    clique->name = config && config->commName ? config->commName : id.internal;
  }
  if (clique->size != nranks) return ncclInvalidUsage;
  ++clique->joined;
  *comm = new ncclComm{clique, rank};
  return config && config->blocking == 0 && clique->joined < clique->size ? ncclInProgress : ncclSuccess;
}
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  std::lock_guard lock(cuda_emulator::queues().mutex);
  cuda_emulator::progress_locked();
  const auto& c = *comm->clique;
  *state = c.aborted ? ncclRemoteError : c.joined < c.size ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}
inline ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
  {
    std::lock_guard lock(cuda_emulator::queues().mutex);
    comm->clique->aborted = true;
  }
  delete comm;
  return ncclSuccess;
}

namespace cuda_emulator {
// This rank's part of its clique's next collective, queued on `stream`.
inline ncclResult_t issue(CollectiveCall call, const void* in, void* out, size_t count, ncclDataType_t type, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  if (!is_queued(stream)) die("NCCL collectives are emulated on the communicators' own (queued) streams only");
  std::shared_ptr<Collective> c;
  uint64_t seq = 0;
  {
    std::lock_guard lock(queues().mutex);
    Clique& clique = *comm->clique;
    if (clique.aborted) return ncclRemoteError;
    if (clique.joined < clique.size) return ncclInvalidUsage;
    seq = clique.issued[static_cast<size_t>(comm->rank)]++;
    auto& slot = clique.open[seq];
    if (!slot) {
      slot = std::make_shared<Collective>(Collective{call, count, type, root, {}, {}, {}});
      slot->in.assign(static_cast<size_t>(clique.size), nullptr);
      slot->out.assign(static_cast<size_t>(clique.size), nullptr);
      slot->reached.assign(static_cast<size_t>(clique.size), false);
    } else if (slot->call != call || slot->count != count || slot->type != type || slot->root != root) {
      std::fprintf(stderr,
                   "cuda_emulator: NCCL %s: collective #%llu is a %s of %zu elements on one rank and a %s of %zu on "
                   "rank %d\n",
                   clique.name.c_str(), static_cast<unsigned long long>(seq), call_name(slot->call), slot->count,
                   call_name(call), count, comm->rank);
      std::abort();
    }
    slot->in[static_cast<size_t>(comm->rank)] = in;
    slot->out[static_cast<size_t>(comm->rank)] = out;
    c = slot;
  }
  const int rank = comm->rank;
  std::shared_ptr<Clique> clique = comm->clique;
  enqueue(stream, [c, clique, rank, seq] {
    c->reached[static_cast<size_t>(rank)] = true;
    if (!c->done && std::find(c->reached.begin(), c->reached.end(), false) == c->reached.end()) {
      run_collective(*c);
      clique->open.erase(seq);
    }
    return c->done;
  });
  return ncclSuccess;
}
}  // namespace cuda_emulator

inline ncclResult_t ncclAllReduce(const void* in, void* out, size_t count, ncclDataType_t type, ncclRedOp_t,
                                  ncclComm_t comm, cudaStream_t stream) {
  return cuda_emulator::issue(cuda_emulator::CollectiveCall::all_reduce, in, out, count, type, 0, comm, stream);
}
inline ncclResult_t ncclAllGather(const void* in, void* out, size_t count, ncclDataType_t type, ncclComm_t comm,
                                  cudaStream_t stream) {
  return cuda_emulator::issue(cuda_emulator::CollectiveCall::all_gather, in, out, count, type, 0, comm, stream);
}
inline ncclResult_t ncclReduceScatter(const void* in, void* out, size_t count, ncclDataType_t type, ncclRedOp_t,
                                      ncclComm_t comm, cudaStream_t stream) {
  return cuda_emulator::issue(cuda_emulator::CollectiveCall::reduce_scatter, in, out, count, type, 0, comm, stream);
}
inline ncclResult_t ncclBroadcast(const void* in, void* out, size_t count, ncclDataType_t type, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  return cuda_emulator::issue(cuda_emulator::CollectiveCall::broadcast, in, out, count, type, root, comm, stream);
}

namespace cuda_emulator {

// This rank's side of one message, waiting in its stream.
struct TransferSide {
  CUstream_st* stream;
  bool sending;
  std::shared_ptr<Transfer> transfer;
  std::shared_ptr<Clique> clique;
  TransferKey key;
};

// The sides issued since the outermost ncclGroupStart of this thread (a rank).
inline int& group_depth() {
  thread_local int depth = 0;
  return depth;
}
inline std::vector<TransferSide>& grouped_sides() {
  thread_local std::vector<TransferSide> sides;
  return sides;
}

inline size_t nccl_type_size(ncclDataType_t t) { return t == ncclFloat32 ? 4 : 2; }

// One stream item for `sides` (all on `stream`): marks them reached, moves every message
// whose two sides are reached, and completes once all of them have moved.
inline void enqueue_sides(CUstream_st* stream, std::vector<TransferSide> sides) {
  enqueue(stream, [sides] {
    bool all_done = true;
    for (const TransferSide& side : sides) {
      Transfer& t = *side.transfer;
      (side.sending ? t.sender_reached : t.receiver_reached) = true;
      if (!t.done && t.sender_reached && t.receiver_reached) {
        if (t.count > 0) std::memcpy(t.to, t.from, t.count * nccl_type_size(t.type));
        t.done = true;
        side.clique->transfers.erase(side.key);
      }
      all_done &= t.done;
    }
    return all_done;
  });
}

// This rank's side of its next message with `peer`: queued now, or at ncclGroupEnd.
inline ncclResult_t issue_transfer(bool sending, const void* from, void* to, size_t count, ncclDataType_t type,
                                   int peer, ncclComm_t comm, cudaStream_t stream) {
  if (!is_queued(stream)) die("NCCL sends and receives are emulated on the communicators' own (queued) streams only");
  TransferSide side{stream, sending, nullptr, comm->clique, {}};
  {
    std::lock_guard lock(queues().mutex);
    Clique& clique = *comm->clique;
    if (clique.aborted) return ncclRemoteError;
    if (clique.joined < clique.size) return ncclInvalidUsage;
    if (peer < 0 || peer >= clique.size) return ncclInvalidArgument;
    const int sender = sending ? comm->rank : peer, receiver = sending ? peer : comm->rank;
    const uint64_t k = (sending ? clique.sends : clique.receives)[{sender, receiver}]++;
    side.key = TransferKey{sender, receiver, k};
    auto& t = clique.transfers[side.key];
    if (!t) t = std::make_shared<Transfer>();
    if ((sending ? t->received : t->sent) && (t->count != count || t->type != type)) {
      std::fprintf(stderr,
                   "cuda_emulator: NCCL %s: message #%llu from rank %d to rank %d is sent as %zu elements of type %d "
                   "and received as %zu of type %d\n",
                   clique.name.c_str(), static_cast<unsigned long long>(k), sender, receiver,
                   sending ? count : t->count, static_cast<int>(sending ? type : t->type), sending ? t->count : count,
                   static_cast<int>(sending ? t->type : type));
      std::abort();
    }
    t->count = count;
    t->type = type;
    (sending ? t->sent : t->received) = true;
    if (sending)
      t->from = from;
    else
      t->to = to;
    side.transfer = t;
  }
  if (group_depth() > 0)
    grouped_sides().push_back(std::move(side));
  else
    enqueue_sides(stream, {std::move(side)});
  return ncclSuccess;
}

inline void end_group() {
  std::vector<std::pair<CUstream_st*, std::vector<TransferSide>>> by_stream;  // in the order first used
  for (TransferSide& side : grouped_sides()) {
    auto it = std::find_if(by_stream.begin(), by_stream.end(), [&](const auto& s) { return s.first == side.stream; });
    if (it == by_stream.end()) it = by_stream.insert(by_stream.end(), {side.stream, {}});
    it->second.push_back(std::move(side));
  }
  grouped_sides().clear();
  for (auto& [stream, sides] : by_stream) enqueue_sides(stream, std::move(sides));
}

}  // namespace cuda_emulator

inline ncclResult_t ncclSend(const void* in, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
  return cuda_emulator::issue_transfer(true, in, nullptr, count, type, peer, comm, stream);
}
inline ncclResult_t ncclRecv(void* out, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
  return cuda_emulator::issue_transfer(false, nullptr, out, count, type, peer, comm, stream);
}
