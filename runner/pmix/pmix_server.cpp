#include "pmix/pmix_server.hpp"

#include <pmix.h>
#include <pmix_server.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "pmix/pmix_client.hpp"

namespace axonn {
namespace {

void check(pmix_status_t rc, const std::string& call) {
  if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED)
    throw PmixError(call + " failed: " + PMIx_Error_string(rc));
}

pmix_proc_t proc_of(const std::string& nspace, pmix_rank_t rank) {
  pmix_proc_t p;
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.nspace, nspace.c_str(), PMIX_MAX_NSLEN);
  p.rank = rank;
  return p;
}

// One upcall owner per process: PMIx's module is a table of plain functions.
PmixServer::AbortHandler g_on_abort;

// Waits for a PMIx operation callback.
struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
  static void callback(pmix_status_t status, void* self) {
    auto* c = static_cast<Completion*>(self);
    std::lock_guard lock(c->mu);
    c->status = status;
    c->done = true;
    c->cv.notify_all();
  }
  pmix_status_t wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  }
};

pmix_status_t on_client_connected(const pmix_proc_t*, void*, pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

// Must call back, or every client stalls ~2 s in PMIx_Finalize.
pmix_status_t on_client_finalized(const pmix_proc_t*, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  if (cbfunc) cbfunc(PMIX_SUCCESS, cbdata);
  return PMIX_SUCCESS;
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[], size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata) {
  if (g_on_abort) g_on_abort(static_cast<int>(proc->rank), status, msg ? msg : "");
  if (cbfunc) cbfunc(PMIX_SUCCESS, cbdata);
  return PMIX_SUCCESS;
}

void release_fence_data(void* data) { std::free(data); }

// Every client is local, so the server library has already combined their contributions:
// hand the blob back. The host owns `data` and frees it once the library is done.
pmix_status_t on_fence(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, char* data, size_t ndata,
                       pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  if (cbfunc) cbfunc(PMIX_SUCCESS, data, ndata, cbdata, release_fence_data, data);
  return PMIX_SUCCESS;
}

// All ranks live on this server, whose library answers requests for local data itself;
// a direct-modex request reaching the host names a process this host never started.
pmix_status_t on_direct_modex(const pmix_proc_t*, const pmix_info_t[], size_t, pmix_modex_cbfunc_t, void*) {
  return PMIX_ERR_NOT_FOUND;
}

pmix_server_module_t make_module() {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.client_connected = on_client_connected;
  m.client_finalized = on_client_finalized;
  m.abort = on_abort;
  m.fence_nb = on_fence;
  m.direct_modex = on_direct_modex;
  return m;
}

pmix_server_module_t g_module = make_module();

std::string make_tmpdir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/axonn-pmix-XXXXXX";
  if (!mkdtemp(pattern.data())) throw PmixError("cannot create a PMIx rendezvous directory at " + pattern);
  return pattern;
}

void load_string(pmix_info_t* info, const char* key, const std::string& value) {
  PMIx_Info_load(info, key, value.c_str(), PMIX_STRING);
}

template <typename T>
void load(pmix_info_t* info, const char* key, T value, pmix_data_type_t type) {
  PMIx_Info_load(info, key, &value, type);
}

}  // namespace

PmixServer::PmixServer(const std::string& nspace, const std::vector<PretendNode>& nodes, AbortHandler on_abort)
    : nspace_(nspace) {
  for (const auto& n : nodes) world_ += static_cast<int>(n.ranks.size());
  g_on_abort = std::move(on_abort);
  tmpdir_ = make_tmpdir();
  // The hash store fails fast on missing job info and starts clients faster than the
  // shared-memory one (DESIGN.md). Clients inherit it through the environment.
  setenv("PMIX_MCA_gds", "hash", 1);

  pmix_info_t init[2];
  PMIX_INFO_CONSTRUCT(&init[0]);
  PMIX_INFO_CONSTRUCT(&init[1]);
  load_string(&init[0], PMIX_SERVER_TMPDIR, tmpdir_);
  load_string(&init[1], PMIX_SYSTEM_TMPDIR, tmpdir_);
  const pmix_status_t rc = PMIx_server_init(&g_module, init, 2);
  PMIX_INFO_DESTRUCT(&init[0]);
  PMIX_INFO_DESTRUCT(&init[1]);
  if (rc != PMIX_SUCCESS) {
    std::filesystem::remove_all(tmpdir_);
    check(rc, "PMIx_server_init");
  }

  // Job-level info, then one PMIX_PROC_DATA array per rank (PMIX_RANK first).
  std::string all_ranks;
  for (int r = 0; r < world_; ++r) all_ranks += (r ? "," : "") + std::to_string(r);
  const size_t njob = 6;
  const size_t ninfo = njob + static_cast<size_t>(world_);
  pmix_info_t* info = nullptr;
  PMIX_INFO_CREATE(info, ninfo);
  load(&info[0], PMIX_UNIV_SIZE, static_cast<uint32_t>(world_), PMIX_UINT32);
  load(&info[1], PMIX_JOB_SIZE, static_cast<uint32_t>(world_), PMIX_UINT32);
  load(&info[2], PMIX_NUM_NODES, static_cast<uint32_t>(nodes.size()), PMIX_UINT32);
  load(&info[3], PMIX_LOCAL_SIZE, static_cast<uint32_t>(world_), PMIX_UINT32);
  load_string(&info[4], PMIX_LOCAL_PEERS, all_ranks);
  load(&info[5], PMIX_APPNUM, static_cast<uint32_t>(0), PMIX_UINT32);
  size_t slot = njob;
  for (size_t node = 0; node < nodes.size(); ++node) {
    for (size_t local = 0; local < nodes[node].ranks.size(); ++local) {
      pmix_data_array_t* proc_data = nullptr;
      PMIX_DATA_ARRAY_CREATE(proc_data, 5, PMIX_INFO);
      auto* items = static_cast<pmix_info_t*>(proc_data->array);
      load(&items[0], PMIX_RANK, static_cast<pmix_rank_t>(nodes[node].ranks[local]), PMIX_PROC_RANK);
      load(&items[1], PMIX_LOCAL_RANK, static_cast<uint16_t>(local), PMIX_UINT16);
      load(&items[2], PMIX_NODE_RANK, static_cast<uint16_t>(local), PMIX_UINT16);
      load(&items[3], PMIX_NODEID, static_cast<uint32_t>(node), PMIX_UINT32);
      load_string(&items[4], PMIX_HOSTNAME, nodes[node].hostname);
      PMIx_Info_load(&info[slot++], PMIX_PROC_DATA, proc_data, PMIX_DATA_ARRAY);
      PMIX_DATA_ARRAY_FREE(proc_data);
    }
  }
  Completion registered;
  pmix_status_t reg = PMIx_server_register_nspace(nspace_.c_str(), world_, info, ninfo, Completion::callback, &registered);
  if (reg == PMIX_SUCCESS) reg = registered.wait();  // keep `info` alive until the callback
  PMIX_INFO_FREE(info, ninfo);
  check(reg, "PMIx_server_register_nspace");

  // Without a registered client, that client's PMIx_Init fails with UNREACHABLE.
  for (int r = 0; r < world_; ++r) {
    const pmix_proc_t proc = proc_of(nspace_, static_cast<pmix_rank_t>(r));
    Completion client;
    pmix_status_t crc = PMIx_server_register_client(&proc, getuid(), getgid(), nullptr, Completion::callback, &client);
    if (crc == PMIX_SUCCESS) crc = client.wait();
    check(crc, "PMIx_server_register_client(rank " + std::to_string(r) + ")");
  }
}

PmixServer::~PmixServer() {
  PMIx_server_finalize();
  g_on_abort = nullptr;
  std::error_code ignored;
  std::filesystem::remove_all(tmpdir_, ignored);  // the library leaves it behind after a failed client
}

std::vector<std::string> PmixServer::client_environment(int rank, const std::vector<std::string>& base) const {
  std::vector<char*> env;
  for (const auto& e : base) env.push_back(strdup(e.c_str()));
  env.push_back(nullptr);
  char** envp = static_cast<char**>(std::malloc(env.size() * sizeof(char*)));
  std::memcpy(envp, env.data(), env.size() * sizeof(char*));
  const pmix_proc_t proc = proc_of(nspace_, static_cast<pmix_rank_t>(rank));
  const pmix_status_t rc = PMIx_server_setup_fork(&proc, &envp);
  std::vector<std::string> out;
  for (char** p = envp; p && *p; ++p) out.emplace_back(*p);
  PMIX_ARGV_FREE(envp);
  check(rc, "PMIx_server_setup_fork(rank " + std::to_string(rank) + ")");
  return out;
}

}  // namespace axonn
