#include "runner/pmix/pmix_client.hpp"

#include <pmix.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runner/pmix/pmix_util.hpp"

namespace axonn {
namespace {

using pmix_detail::InfoList;
using pmix_detail::make_proc;

std::optional<uint64_t> as_uint(const pmix_value_t& v) {
  auto non_negative = [](int64_t x) { return x >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(x)) : std::nullopt; };
  switch (v.type) {
    case PMIX_UINT8: return v.data.uint8;
    case PMIX_UINT16: return v.data.uint16;
    case PMIX_UINT32: return v.data.uint32;
    case PMIX_UINT64: return v.data.uint64;
    case PMIX_SIZE: return v.data.size;
    case PMIX_PROC_RANK: return v.data.rank;
    case PMIX_INT: return non_negative(v.data.integer);
    case PMIX_INT8: return non_negative(v.data.int8);
    case PMIX_INT16: return non_negative(v.data.int16);
    case PMIX_INT32: return non_negative(v.data.int32);
    case PMIX_INT64: return non_negative(v.data.int64);
    default: return std::nullopt;
  }
}

std::optional<std::string> as_string(const pmix_value_t& v) {
  if (v.type != PMIX_STRING || !v.data.string) return std::nullopt;
  return std::string(v.data.string);
}

// PMIx_Get of one key; nullptr when the server does not have it. The caller releases it.
pmix_value_t* lookup(const pmix_proc_t& proc, const char* key, InfoList* qualifiers, const std::string& what) {
  pmix_value_t* value = nullptr;
  const pmix_status_t rc = qualifiers ? PMIx_Get(&proc, key, qualifiers->data(), qualifiers->size(), &value)
                                      : PMIx_Get(&proc, key, nullptr, 0, &value);
  if (rc == PMIX_ERR_NOT_FOUND || rc == PMIX_ERR_NOT_SUPPORTED) return nullptr;
  pmix_check(rc, what);
  return value;
}

template <typename Convert>
auto read_value(const pmix_proc_t& proc, const char* key, Convert convert) -> decltype(convert(pmix_value_t{})) {
  pmix_value_t* value = lookup(proc, key, nullptr, std::string("PMIx_Get(") + key + ")");
  if (!value) return std::nullopt;
  auto out = convert(*value);
  PMIX_VALUE_RELEASE(value);
  return out;
}

pmix_rank_t checked_rank(int rank, int size, const std::string& what) {
  if (rank < 0 || rank >= size)
    throw PmixError(what + ": rank " + std::to_string(rank) + " is outside the job's ranks 0.." +
                    std::to_string(size - 1));
  return static_cast<pmix_rank_t>(rank);
}

}  // namespace

bool pmix_server_in_environment() {
  for (const char* name : {"PMIX_NAMESPACE", "PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                           "PMIX_SERVER_URI21", "PMIX_SERVER_URI2", "PMIX_SERVER_URI"})
    if (const char* v = std::getenv(name); v && *v) return true;
  return false;
}

PmixClient::PmixClient() {
  if (!pmix_server_in_environment())
    throw PmixError(
        "no PMIx server started this process (PMIX_NAMESPACE and PMIX_SERVER_URI* are not set): start it with "
        "`srun --mpi=pmix ...` under Slurm, or `axonn run -n N ...` on one machine");
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  const pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS)
    throw PmixError("PMIx_Init", rc,
                    "the PMIx server named in this process's environment did not accept it; was it started by "
                    "`srun --mpi=pmix` or `axonn run`, and is that launcher still running?");
  nspace_ = me.nspace;
  rank_ = static_cast<int>(me.rank);
  std::optional<uint64_t> size;
  try {
    size = job_uint(PMIX_JOB_SIZE);
  } catch (...) {
    PMIx_Finalize(nullptr, 0);
    throw;
  }
  if (!size || *size == 0) {
    PMIx_Finalize(nullptr, 0);
    throw PmixError("the PMIx server gave no " + std::string(PMIX_JOB_SIZE) + " for namespace " + nspace_ +
                    "; this launcher's PMIx support is incomplete");
  }
  size_ = static_cast<int>(*size);
}

PmixClient::~PmixClient() { PMIx_Finalize(nullptr, 0); }

std::optional<uint64_t> PmixClient::job_uint(const char* key) const {
  return read_value(make_proc(nspace_, PMIX_RANK_WILDCARD), key, as_uint);
}

std::optional<uint64_t> PmixClient::rank_uint(int rank, const char* key) const {
  return read_value(make_proc(nspace_, checked_rank(rank, size_, key)), key, as_uint);
}

std::optional<std::string> PmixClient::job_string(const char* key) const {
  return read_value(make_proc(nspace_, PMIX_RANK_WILDCARD), key, as_string);
}

std::optional<std::string> PmixClient::rank_string(int rank, const char* key) const {
  return read_value(make_proc(nspace_, checked_rank(rank, size_, key)), key, as_string);
}

void PmixClient::put(const std::string& key, const std::vector<char>& value) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = const_cast<char*>(value.data());  // PMIx_Put copies it
  v.data.bo.size = value.size();
  pmix_check(PMIx_Put(PMIX_GLOBAL, key.c_str(), &v), "PMIx_Put(" + key + ", " + std::to_string(value.size()) + " bytes)");
  uncommitted_ = true;
}

void PmixClient::commit() {
  pmix_check(PMIx_Commit(), "PMIx_Commit");
  uncommitted_ = false;
}

void PmixClient::fence() { fence(true); }

void PmixClient::fence(bool collect_data) { fence_procs(nullptr, collect_data, "PMIx_Fence(all ranks)"); }

void PmixClient::fence_ranks(const std::vector<int>& ranks, bool collect_data) {
  std::string call = "PMIx_Fence(ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) call += ',';
    call += std::to_string(ranks[i]);
  }
  call += ")";
  if (ranks.empty()) throw PmixError(call + ": the list of ranks is empty");
  for (int r : ranks) checked_rank(r, size_, call);
  fence_procs(&ranks, collect_data, call);
}

void PmixClient::fence_procs(const std::vector<int>* ranks, bool collect_data, const std::string& call) {
  if (uncommitted_) commit();
  std::vector<pmix_proc_t> procs;
  if (ranks)
    for (int r : *ranks) procs.push_back(make_proc(nspace_, static_cast<pmix_rank_t>(r)));
  else
    procs.push_back(make_proc(nspace_, PMIX_RANK_WILDCARD));
  InfoList info;
  info.add_bool(PMIX_COLLECT_DATA, collect_data);
  if (timeout_s_ > 0) info.add_int(PMIX_TIMEOUT, timeout_s_);
  pmix_check(PMIx_Fence(procs.data(), procs.size(), info.data(), info.size()), call);
}

std::vector<char> PmixClient::get(int rank, const std::string& key) {
  const std::string what = "PMIx_Get(" + key + ") from rank " + std::to_string(rank);
  const pmix_proc_t proc = make_proc(nspace_, checked_rank(rank, size_, what));
  pmix_value_t* value = nullptr;
  if (timeout_s_ > 0) {
    InfoList info;
    info.add_int(PMIX_TIMEOUT, timeout_s_);
    value = lookup(proc, key.c_str(), &info, what);
  } else {
    value = lookup(proc, key.c_str(), nullptr, what);
  }
  if (!value)
    throw PmixError(what + ": not found; that rank must put it and both must pass a fence before this get");
  if (value->type != PMIX_BYTE_OBJECT) {
    PMIX_VALUE_RELEASE(value);
    throw PmixError(what + ": the value is not a byte object; use a key of its own for axonn's exchange");
  }
  std::vector<char> out(value->data.bo.bytes, value->data.bo.bytes + value->data.bo.size);
  PMIX_VALUE_RELEASE(value);
  return out;
}

void PmixClient::set_timeout(std::chrono::seconds timeout) {
  timeout_s_ = timeout.count() <= 0 ? 0 : static_cast<int>(std::max<std::chrono::seconds::rep>(1, timeout.count()));
}

void PmixClient::abort(int status, const std::string& message) {
  PMIx_Abort(status, message.c_str(), nullptr, 0);
  std::_Exit(status != 0 ? status : 1);
}

}  // namespace axonn
