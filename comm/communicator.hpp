#pragma once
// One process group's collectives, the same interface on every backend (Gloo on CPU,
// NCCL on GPU). Buffers are `count` elements of `type`: host memory for Gloo, device
// memory for NCCL. Gloo calls block until done; NCCL calls are queued on the
// communicator's CUDA stream and return at once, and synchronize() waits for them. A
// collective that does not finish within the group's timeout throws CommError naming the
// group, the collective and the peers it waited on.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "layout/collective.hpp"
#include "layout/element_type.hpp"

namespace axonn {

// A collective or a communicator's set-up failed: exit code 1.
class CommError : public Error {
 public:
  explicit CommError(const std::string& message) : Error(message, exit_code::failure) {}
};

// Called after every collective with its size in bytes (nccl-tests' "size": the
// all-reduce buffer, the all-gather output, the reduce-scatter input, the broadcast
// buffer, this rank's whole all-to-all send buffer, its own block included (the sum of its
// send counts for all_to_allv); 0 for a barrier) and its duration, on the thread that ran it
// (Gloo) or saw it finish (NCCL). The grid uses it to count bytes per axis. started: it ran
// beside the caller's work (Communicator::start_*; Gloo tells, NCCL leaves it false).
struct CollectiveRecord {
  CollectiveKind kind;
  size_t bytes;
  std::chrono::nanoseconds duration;
  bool started = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // within the group
  virtual int size() const = 0;
  // World ranks of the group's members, in group-rank order (for error messages).
  virtual const std::vector<int>& members() const = 0;
  virtual const std::string& name() const = 0;  // e.g. "x", "data", "world"

  // In place: buf (count) <- sum over the group.
  virtual void all_reduce(void* buf, size_t count, ElementType type) = 0;
  // in (count) from every rank -> out (count * size), rank r's block at r * count. In place
  // when in is out's block r.
  virtual void all_gather(const void* in, void* out, size_t count, ElementType type) = 0;
  // in (count * size) -> out (count): block r of the sum over the group, on rank r. In place
  // when out is in's block r; the other blocks of `in` may then be overwritten (with partial
  // sums on Gloo), as NCCL allows.
  virtual void reduce_scatter(const void* in, void* out, size_t count, ElementType type) = 0;
  // buf (count) <- root's buf.
  virtual void broadcast(void* buf, size_t count, int root, ElementType type) = 0;
  // in (count * size) -> out (count * size): block j of `in` goes to group rank j, which
  // stores it as block r of its `out` (r = this rank); this rank's own block is copied. Not in
  // place: `in` and `out` must not overlap. Expert parallelism's token exchange.
  virtual void all_to_all(const void* in, void* out, size_t count, ElementType type) = 0;
  // all_to_all with a count (elements) per peer: `in` holds send_counts[j] elements for group
  // rank j, `out` receives recv_counts[j] from group rank j, each buffer's blocks back to back
  // in group-rank order (block j at the sum of the counts before j). send_counts[j] on rank r
  // must equal recv_counts[r] on rank j: the caller exchanges the counts first (e.g. an
  // all_to_all of one count per peer), since a mismatch is undefined on NCCL. Both vectors
  // have size() entries (else CommError); zero counts are allowed. Not in place.
  virtual void all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                           const std::vector<size_t>& recv_counts, ElementType type) = 0;
  // Blocks the host until every rank of the group has called barrier (and, on the GPU,
  // this communicator's queued collectives are done).
  virtual void barrier() = 0;
  // Blocks the host until the collectives issued so far are done, so their results and
  // their records (CollectiveRecord) are in; throws CommError on a timeout. Nothing to
  // wait for on a blocking backend.
  virtual void synchronize() {}
  // The largest message of `kind` (nccl-tests size, bytes) that this communicator sends by
  // another path than larger ones, so that calibrate fits the two apart; 0: one path for
  // every size.
  virtual size_t small_path_bytes(CollectiveKind kind) const {
    (void)kind;
    return 0;
  }

  // Overlap with compute. A started collective returns a ticket at once and runs beside the
  // caller's later work (Gloo: on the communicator's thread; NCCL: on its stream, after the
  // compute queued so far). Its buffers stay untouched by the caller until finish(ticket);
  // after that the caller's work sees the result (NCCL: work queued on the compute stream
  // from then on). finish(t) also finishes every collective started before t, and rethrows
  // a started collective's CommError. A group's collectives run in the order they were
  // called, started or not: a blocking call first lets the started ones end.
  // Here (groups of one, and any backend without its own): the collective runs now, and
  // finish has nothing left to do.
  using Ticket = uint64_t;
  virtual Ticket start_all_reduce(void* buf, size_t count, ElementType type) {
    all_reduce(buf, count, type);
    return 0;
  }
  virtual Ticket start_all_gather(const void* in, void* out, size_t count, ElementType type) {
    all_gather(in, out, count, type);
    return 0;
  }
  virtual Ticket start_reduce_scatter(const void* in, void* out, size_t count, ElementType type) {
    reduce_scatter(in, out, count, type);
    return 0;
  }
  virtual Ticket start_all_to_all(const void* in, void* out, size_t count, ElementType type) {
    all_to_all(in, out, count, type);
    return 0;
  }
  // The counts are copied: the caller's vectors may go before finish.
  virtual Ticket start_all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                                   const std::vector<size_t>& recv_counts, ElementType type) {
    all_to_allv(in, send_counts, out, recv_counts, type);
    return 0;
  }
  virtual void finish(Ticket ticket) { (void)ticket; }
  // The time the caller has spent blocked waiting for started collectives (in finish, or in a
  // blocking call behind them): what overlap did not hide. Zero where the host never waits for
  // them (NCCL orders them on streams) or none was started.
  virtual std::chrono::nanoseconds started_wait_time() const { return {}; }

 protected:
  // all_to_allv's checks, shared by the backends, before anything is sent: both count
  // vectors have one entry per group rank, and this rank's block to itself has the same count
  // both ways (CommError naming the values otherwise). Returns the bytes this rank sends, its
  // record's size.
  size_t all_to_allv_bytes(const std::vector<size_t>& send_counts, const std::vector<size_t>& recv_counts,
                           ElementType type) const {
    const auto n = static_cast<size_t>(size());
    if (send_counts.size() != n || recv_counts.size() != n)
      throw CommError("all_to_allv on group '" + name() + "' (" + std::to_string(n) + " ranks): send_counts has " +
                      std::to_string(send_counts.size()) + " entries and recv_counts " +
                      std::to_string(recv_counts.size()) + "; give one count per group rank, " + std::to_string(n) +
                      " each");
    const auto self = static_cast<size_t>(rank());
    if (send_counts[self] != recv_counts[self])
      throw CommError("all_to_allv on group '" + name() + "': group rank " + std::to_string(rank()) + " sends " +
                      std::to_string(send_counts[self]) + " elements to itself but expects " +
                      std::to_string(recv_counts[self]) +
                      "; send_counts[j] on rank r must equal recv_counts[r] on rank j");
    size_t elements = 0;
    for (const size_t c : send_counts) elements += c;
    return elements * element_size(type);
  }
};

}  // namespace axonn
