#pragma once
// This process as a PMIx client: RAII PMIx_Init/PMIx_Finalize, job-level and per-rank
// queries, and the bootstrap exchange of byte blobs (put, commit, fence, get) that the
// communicators connect through. Works under `srun --mpi=pmix` (Slurm's mpi/pmix_v4),
// `axonn run` (the local launcher) and OpenMPI's `mpirun`. Every failed PMIx call throws
// PmixError naming the call and PMIx_Error_string of its status.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/exchange.hpp"
#include "runner/pmix/pmix_error.hpp"

namespace axonn {

// True when this process was started by a PMIx server: its environment has
// PMIX_NAMESPACE or a PMIX_SERVER_URI* variable.
bool pmix_server_in_environment();

class PmixClient final : public Exchange {
 public:
  // Connects to the server that started this process (PMIx_Init). Outside any PMIx
  // server it throws at once, before trying, saying to start through
  // `srun --mpi=pmix` or `axonn run -n N`.
  PmixClient();
  ~PmixClient() override;  // PMIx_Finalize
  PmixClient(const PmixClient&) = delete;
  PmixClient& operator=(const PmixClient&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }  // PMIX_JOB_SIZE
  const std::string& nspace() const { return nspace_; }

  // Job-level values are read on the wildcard rank, per-rank values on that rank; nullopt
  // when the server does not provide the key. Integers of any PMIx width are accepted.
  std::optional<uint64_t> job_uint(const char* key) const;
  std::optional<uint64_t> rank_uint(int rank, const char* key) const;
  std::optional<std::string> job_string(const char* key) const;
  std::optional<std::string> rank_string(int rank, const char* key) const;

  // Publishes `value` under `key` (PMIx_Put, PMIX_GLOBAL scope, a PMIX_BYTE_OBJECT). The
  // other ranks can read it after commit() and a fence; a fence commits by itself.
  void put(const std::string& key, const std::vector<char>& value) override;
  void commit();  // PMIx_Commit

  // Collective over every rank of the job, collecting the data (PMIX_COLLECT_DATA): after
  // it, get() of anything put before it is local. Commits uncommitted puts first.
  void fence() override;
  // The same with collect_data=false: a barrier whose gets fetch data on demand. Under
  // Slurm that returned NOT-FOUND across nodes (docs/architecture.md); prefer collecting fences.
  void fence(bool collect_data);
  // A fence over `ranks` only (every one of them calls it with the same list, in any
  // order); ranks outside it are not involved. Throws PmixError for an empty list or a
  // rank outside [0, size()).
  void fence_ranks(const std::vector<int>& ranks, bool collect_data = true);

  // The value `rank` put under `key` (PMIx_Get). Throws PmixError naming the rank and the
  // key when it is not there (put missing, or no fence since).
  std::vector<char> get(int rank, const std::string& key) override;

  // Fences and gets give up after `timeout` with PmixError (PMIX_TIMEOUT, whole seconds,
  // at least 1); zero, the default, waits as long as the job runs.
  void set_timeout(std::chrono::seconds timeout);

  // Tells the server this job failed (PMIx_Abort: the launcher kills every rank and
  // reports `status` and `message`), then exits with `status` (1 when it is 0).
  [[noreturn]] void abort(int status, const std::string& message);

 private:
  void fence_procs(const std::vector<int>* ranks, bool collect_data, const std::string& call);
  std::string nspace_;
  int rank_ = 0;
  int size_ = 0;
  bool uncommitted_ = false;
  int timeout_s_ = 0;
};

}  // namespace axonn
