#include "runner/pmix/pmix_server.hpp"

#include <pmix.h>
#include <pmix_server.h>
#include <spdlog/spdlog.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "runner/pmix/job_info.hpp"
#include "runner/pmix/pmix_error.hpp"
#include "runner/pmix/pmix_util.hpp"

namespace axonn {
namespace {

using pmix_detail::InfoList;
using pmix_detail::make_proc;
using pmix_detail::OpCompletion;

// The upcalls are plain functions: they reach the current job through these, under g_mu.
std::mutex g_mu;
std::string g_nspace;     // the registered job's namespace; empty when none
PmixJobEvents g_events;
std::string g_directory;  // the server's rendezvous directory; empty until it started

// Runs `fn` on the current job's events when `proc` belongs to it.
template <typename Fn>
void with_job(const pmix_proc_t* proc, Fn fn) {
  std::lock_guard lock(g_mu);
  if (proc && !g_nspace.empty() && PMIX_CHECK_NSPACE(proc->nspace, g_nspace.c_str())) fn(g_events);
}

pmix_status_t on_client_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t, void*) {
  with_job(proc, [&](PmixJobEvents& e) {
    if (e.connected) e.connected(static_cast<int>(proc->rank));
  });
  return PMIX_OPERATION_SUCCEEDED;
}

// libpmix 4.2 calls this one (with no callback to make) instead of client_connected.
pmix_status_t on_client_connected2(const pmix_proc_t* proc, void* object, pmix_info_t[], size_t, pmix_op_cbfunc_t cbfunc,
                                   void* cbdata) {
  return on_client_connected(proc, object, cbfunc, cbdata);
}

// Must call back, or every client stalls ~2 s in PMIx_Finalize.
pmix_status_t on_client_finalized(const pmix_proc_t*, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  if (cbfunc) cbfunc(PMIX_SUCCESS, cbdata);
  return PMIX_SUCCESS;
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[], size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata) {
  with_job(proc, [&](PmixJobEvents& e) {
    if (e.aborted) e.aborted(static_cast<int>(proc->rank), status, msg ? msg : "");
  });
  if (cbfunc) cbfunc(PMIX_SUCCESS, cbdata);
  return PMIX_SUCCESS;
}

void release_fence_data(void* data) { std::free(data); }

// Every rank is a client of this one server, so the library has already combined all
// contributions into `data`: hand it back. The host owns `data` and frees it once the
// library has released it.
pmix_status_t on_fence(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, char* data, size_t ndata,
                       pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  if (cbfunc) cbfunc(PMIX_SUCCESS, data, ndata, cbdata, release_fence_data, data);
  return PMIX_SUCCESS;
}

// The library answers requests for its own clients' data itself; a direct-modex request
// that reaches the host names a process no client of this server is.
pmix_status_t on_direct_modex(const pmix_proc_t*, const pmix_info_t[], size_t, pmix_modex_cbfunc_t, void*) {
  return PMIX_ERR_NOT_FOUND;
}

pmix_server_module_t make_module() {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.client_connected = on_client_connected;
  m.client_connected2 = on_client_connected2;
  m.client_finalized = on_client_finalized;
  m.abort = on_abort;
  m.fence_nb = on_fence;
  m.direct_modex = on_direct_modex;
  return m;
}

pmix_server_module_t g_module = make_module();

// Sets an environment variable for the lifetime of the object, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty())
      unsetenv(name_);
    else
      setenv(name_, old_.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A launcher killed with -9 cannot remove its directory "axonn-pmix-<pid>-XXXXXX": the
// next one removes those of this user whose pid is gone.
void remove_directories_of_dead_launchers(const std::string& base) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (!starts_with(name, "axonn-pmix-")) continue;
    const char* digits = name.c_str() + std::strlen("axonn-pmix-");
    char* end = nullptr;
    const long pid = std::strtol(digits, &end, 10);
    struct stat st;
    if (end == digits || *end != '-' || pid <= 0 || stat(entry.path().c_str(), &st) != 0 || st.st_uid != getuid())
      continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(entry.path(), ec);
  }
}

// The server library, started at first use. At exit it is left running, never finalized:
// libpmix 4.2 can complete a fence twice when two of its clients are lost while it waits for
// them (a rank died, the launcher stopped the others in the fence; openpmix issue 4112, fixed
// after 4.2), which leaves a freed record on its list of collectives. Nothing reads that list
// until PMIx_server_finalize, which then hangs on the freed record's lock or crashes freeing it,
// a few exits in a thousand after a rank was killed. What finalize would release, the exit
// does: the memory and sockets with the process, the rendezvous files with the directory.
class ServerLibrary {
 public:
  static ServerLibrary& instance() {
    static ServerLibrary library;
    return library;
  }
  ~ServerLibrary() {
    remove_directory();
    std::lock_guard lock(g_mu);
    g_directory.clear();
  }
  ServerLibrary(const ServerLibrary&) = delete;
  ServerLibrary& operator=(const ServerLibrary&) = delete;

 private:
  ServerLibrary() {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : "/tmp";
    remove_directories_of_dead_launchers(base);
    std::string pattern = base + "/axonn-pmix-" + std::to_string(getpid()) + "-XXXXXX";
    if (!mkdtemp(pattern.data()))
      throw PmixError("cannot create the PMIx server directory " + pattern + ": " + std::strerror(errno) +
                      "; set TMPDIR to a writable directory");
    directory_ = pattern;
    // The hash store fails fast on incomplete job info and starts clients faster than
    // the shared-memory one (docs/architecture.md); the library reads its MCA settings at init.
    const ScopedEnv gds("PMIX_MCA_gds", "hash");
    // The library ignores environment variables for its directories: only these keys work.
    InfoList init;
    init.add_string(PMIX_SERVER_TMPDIR, directory_);
    init.add_string(PMIX_SYSTEM_TMPDIR, directory_);
    const pmix_status_t rc = PMIx_server_init(&g_module, init.data(), init.size());
    if (rc != PMIX_SUCCESS) {
      remove_directory();
      throw PmixError("PMIx_server_init", rc, "the local launcher cannot host a PMIx server");
    }
    std::lock_guard lock(g_mu);
    g_directory = directory_;
    spdlog::debug("axonn run: PMIx server started, rendezvous files in {}", directory_);
  }

  // The library leaves files behind after a failed client. Runs at exit, when spdlog's
  // registry may be gone: plain stderr.
  void remove_directory() {
    std::error_code ec;
    std::filesystem::remove_all(directory_, ec);
    if (ec)
      std::fprintf(stderr, "axonn run: cannot remove the PMIx server directory %s: %s\n", directory_.c_str(),
                   ec.message().c_str());
  }

  std::string directory_;
};


}  // namespace

PmixJob::PmixJob(const std::string& nspace, const std::vector<PretendNode>& nodes, PmixJobEvents events)
    : nspace_(nspace) {
  for (const auto& node : nodes) world_ += static_cast<int>(node.ranks.size());
  if (nspace.empty() || nspace.size() > PMIX_MAX_NSLEN)
    throw PmixError("PMIx namespace '" + nspace + "' must have 1 to " + std::to_string(PMIX_MAX_NSLEN) + " characters");
  ServerLibrary::instance();
  {
    std::lock_guard lock(g_mu);
    if (!g_nspace.empty())
      throw PmixError("PMIx namespace " + g_nspace + " is still running in this process; run one local job at a time");
    g_nspace = nspace_;
    g_events = std::move(events);
  }
  try {
    InfoList info;
    pmix_detail::add_job_info(info, nspace_, nodes);
    OpCompletion registered;  // `info` must stay alive until the callback
    pmix_status_t rc = PMIx_server_register_nspace(nspace_.c_str(), world_, info.data(), info.size(),
                                                   OpCompletion::callback, &registered);
    if (rc == PMIX_SUCCESS) rc = registered.wait();
    pmix_check(rc, "PMIx_server_register_nspace(" + nspace_ + ")", true);
    // Without its registration, a client's PMIx_Init fails with UNREACHABLE.
    for (int r = 0; r < world_; ++r) {
      const pmix_proc_t proc = make_proc(nspace_, static_cast<pmix_rank_t>(r));
      OpCompletion client;
      rc = PMIx_server_register_client(&proc, getuid(), getgid(), nullptr, OpCompletion::callback, &client);
      if (rc == PMIX_SUCCESS) rc = client.wait();
      pmix_check(rc, "PMIx_server_register_client(" + nspace_ + ", rank " + std::to_string(r) + ")", true);
    }
  } catch (...) {
    deregister();
    throw;
  }
}

// The namespace stays registered. libpmix 4.2 handles a client's dropped connection on its
// progress thread some time after the client died; deregistering the namespace first
// frees what that handler then uses (seen here as a hang on a freed mutex, or a crash at
// exit, a few runs in a hundred after a rank was killed). A namespace costs a few
// kilobytes until the process exits, and every job has a namespace of its own.
PmixJob::~PmixJob() { release_job_slot(); }

// Only for a registration that failed: no client of it can have connected yet.
void PmixJob::deregister() noexcept {
  OpCompletion done;
  PMIx_server_deregister_nspace(nspace_.c_str(), OpCompletion::callback, &done);
  done.wait();
  release_job_slot();
}

void PmixJob::release_job_slot() noexcept {
  std::lock_guard lock(g_mu);
  if (g_nspace == nspace_) {
    g_nspace.clear();
    g_events = {};
  }
}

std::vector<std::string> PmixJob::client_environment(int rank, const std::vector<std::string>& base) const {
  // PMIx_server_setup_fork grows the array with realloc: a malloc'ed argv-style array.
  std::vector<std::string> kept;
  for (const auto& e : base)
    if (!starts_with(e, "PMIX_") || starts_with(e, "PMIX_MCA_")) kept.push_back(e);
  kept.emplace_back("PMIX_MCA_gds=hash");
  char** env = static_cast<char**>(std::calloc(kept.size() + 1, sizeof(char*)));
  if (!env) throw PmixError("out of memory building the environment of rank " + std::to_string(rank));
  for (size_t i = 0; i < kept.size(); ++i) env[i] = strdup(kept[i].c_str());
  const pmix_proc_t proc = make_proc(nspace_, static_cast<pmix_rank_t>(rank));
  const pmix_status_t rc = PMIx_server_setup_fork(&proc, &env);
  std::vector<std::string> out;
  for (char** p = env; p && *p; ++p) out.emplace_back(*p);
  PMIX_ARGV_FREE(env);
  pmix_check(rc, "PMIx_server_setup_fork(" + nspace_ + ", rank " + std::to_string(rank) + ")");
  return out;
}

std::string pmix_server_directory() {
  std::lock_guard lock(g_mu);
  return g_directory;
}

}  // namespace axonn
