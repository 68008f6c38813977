#include "pmix/pmix_client.hpp"

#include <pmix.h>

#include <cstdlib>
#include <cstring>

namespace axonn {
namespace {

void check(pmix_status_t rc, const std::string& call) {
  if (rc != PMIX_SUCCESS) throw PmixError(call + " failed: " + PMIx_Error_string(rc));
}

pmix_proc_t proc_of(const std::string& nspace, pmix_rank_t rank) {
  pmix_proc_t p;
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.nspace, nspace.c_str(), PMIX_MAX_NSLEN);
  p.rank = rank;
  return p;
}

std::optional<uint64_t> as_uint(const pmix_value_t& v) {
  switch (v.type) {
    case PMIX_UINT8: return v.data.uint8;
    case PMIX_UINT16: return v.data.uint16;
    case PMIX_UINT32: return v.data.uint32;
    case PMIX_UINT64: return v.data.uint64;
    case PMIX_SIZE: return v.data.size;
    case PMIX_INT: return v.data.integer >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(v.data.integer)) : std::nullopt;
    case PMIX_INT32: return v.data.int32 >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(v.data.int32)) : std::nullopt;
    case PMIX_PROC_RANK: return v.data.rank;
    default: return std::nullopt;
  }
}

// PMIx_Get of one key; nullptr when not found. The caller releases the value.
pmix_value_t* lookup(const pmix_proc_t& proc, const char* key) {
  pmix_value_t* value = nullptr;
  const pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &value);
  if (rc == PMIX_ERR_NOT_FOUND || rc == PMIX_ERR_NOT_SUPPORTED) return nullptr;
  check(rc, std::string("PMIx_Get(") + key + ")");
  return value;
}

template <typename Convert>
auto read_value(const pmix_proc_t& proc, const char* key, Convert convert) -> decltype(convert(pmix_value_t{})) {
  pmix_value_t* value = lookup(proc, key);
  if (!value) return std::nullopt;
  auto out = convert(*value);
  PMIX_VALUE_RELEASE(value);
  return out;
}

std::optional<std::string> as_string(const pmix_value_t& v) {
  if (v.type != PMIX_STRING || !v.data.string) return std::nullopt;
  return std::string(v.data.string);
}

}  // namespace

bool pmix_server_in_environment() {
  return std::getenv("PMIX_NAMESPACE") || std::getenv("PMIX_SERVER_URI41") || std::getenv("PMIX_SERVER_URI4") ||
         std::getenv("PMIX_SERVER_URI3") || std::getenv("PMIX_SERVER_URI21") || std::getenv("PMIX_SERVER_URI2");
}

PmixClient::PmixClient() {
  if (!pmix_server_in_environment())
    throw PmixError(
        "no PMIx server started this process (PMIX_NAMESPACE is not set): start it with "
        "`srun --mpi=pmix ...` under Slurm, or `axonn run -n N ...` on one machine");
  pmix_proc_t me;
  check(PMIx_Init(&me, nullptr, 0), "PMIx_Init");
  nspace_ = me.nspace;
  rank_ = static_cast<int>(me.rank);
  const auto size = job_uint(PMIX_JOB_SIZE);
  if (!size) {
    PMIx_Finalize(nullptr, 0);
    throw PmixError("PMIx server gave no " + std::string(PMIX_JOB_SIZE) + " for namespace " + nspace_);
  }
  size_ = static_cast<int>(*size);
}

PmixClient::~PmixClient() { PMIx_Finalize(nullptr, 0); }

std::optional<uint64_t> PmixClient::job_uint(const char* key) const {
  return read_value(proc_of(nspace_, PMIX_RANK_WILDCARD), key, as_uint);
}

std::optional<uint64_t> PmixClient::rank_uint(int rank, const char* key) const {
  return read_value(proc_of(nspace_, static_cast<pmix_rank_t>(rank)), key, as_uint);
}

std::optional<std::string> PmixClient::job_string(const char* key) const {
  return read_value(proc_of(nspace_, PMIX_RANK_WILDCARD), key, as_string);
}

std::optional<std::string> PmixClient::rank_string(int rank, const char* key) const {
  return read_value(proc_of(nspace_, static_cast<pmix_rank_t>(rank)), key, as_string);
}

void PmixClient::put(const std::string& key, const std::vector<char>& value) {
  pmix_value_t v;
  std::memset(&v, 0, sizeof v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = const_cast<char*>(value.data());
  v.data.bo.size = value.size();
  check(PMIx_Put(PMIX_GLOBAL, key.c_str(), &v), "PMIx_Put(" + key + ")");
  check(PMIx_Commit(), "PMIx_Commit");
}

void PmixClient::fence() {
  // Collect data: a non-collecting fence followed by a Get from a rank on another node
  // sometimes returned NOT-FOUND under Slurm (DESIGN.md).
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  bool collect = true;
  PMIx_Info_load(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  const pmix_proc_t all = proc_of(nspace_, PMIX_RANK_WILDCARD);
  const pmix_status_t rc = PMIx_Fence(&all, 1, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  check(rc, "PMIx_Fence");
}

std::vector<char> PmixClient::get(int rank, const std::string& key) {
  pmix_value_t* value = lookup(proc_of(nspace_, static_cast<pmix_rank_t>(rank)), key.c_str());
  if (!value) throw PmixError("PMIx_Get(" + key + ") from rank " + std::to_string(rank) + ": not found");
  if (value->type != PMIX_BYTE_OBJECT) {
    PMIX_VALUE_RELEASE(value);
    throw PmixError("PMIx_Get(" + key + ") from rank " + std::to_string(rank) + ": not a byte object");
  }
  std::vector<char> out(value->data.bo.bytes, value->data.bo.bytes + value->data.bo.size);
  PMIX_VALUE_RELEASE(value);
  return out;
}

void PmixClient::abort(int status, const std::string& message) {
  PMIx_Abort(status, message.c_str(), nullptr, 0);
  std::_Exit(status);
}

}  // namespace axonn
