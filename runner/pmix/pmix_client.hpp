#pragma once
// This process as a PMIx client: RAII PMIx_Init/PMIx_Finalize, job-level and per-rank
// queries, and put/commit/fence/get of byte blobs (the bootstrap Exchange that the
// communicators connect through). Works under `srun --mpi=pmix`, `axonn run`, and
// OpenMPI's `mpirun`. Every failed PMIx call throws PmixError naming the call.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/exchange.hpp"

namespace axonn {

class PmixError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// True when this process was started by a PMIx server (its environment names one).
bool pmix_server_in_environment();

class PmixClient final : public Exchange {
 public:
  // Connects to the server that started this process. Outside any PMIx server it throws
  // at once, telling the user to start through `srun --mpi=pmix` or `axonn run -n N`.
  PmixClient();
  ~PmixClient() override;
  PmixClient(const PmixClient&) = delete;
  PmixClient& operator=(const PmixClient&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& nspace() const { return nspace_; }

  // Job-level (wildcard rank) and per-rank values; nullopt when the server does not
  // provide the key. Integers of any PMIx width are accepted.
  std::optional<uint64_t> job_uint(const char* key) const;
  std::optional<uint64_t> rank_uint(int rank, const char* key) const;
  std::optional<std::string> job_string(const char* key) const;
  std::optional<std::string> rank_string(int rank, const char* key) const;

  void put(const std::string& key, const std::vector<char>& value) override;  // PMIx_Put + PMIx_Commit
  void fence() override;  // collecting fence over every rank of the job
  std::vector<char> get(int rank, const std::string& key) override;

  // Tells the server this job failed (it kills every rank); for fatal errors on one rank.
  [[noreturn]] void abort(int status, const std::string& message);

 private:
  std::string nspace_;
  int rank_ = 0;
  int size_ = 0;
};

}  // namespace axonn
