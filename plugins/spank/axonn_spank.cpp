// The axonn SPANK plugin: `--axonn-layout=auto|validate|off|DxXxYxZ[eN][:ORDER]` on srun, sbatch and
// salloc. This file holds every exported symbol (axonn_spank.map exports nothing else) and
// switches on spank_context() into one file per context:
//   srun (local)               local_context.cpp   decide the layout before any task starts
//   slurmstepd (remote)        remote_context.cpp  export it to the tasks
//   sbatch/salloc (allocator)  only the option check below; the batch script's srun decides
// No exception crosses the C ABI: each entry point catches everything and reports it with
// slurm_error("axonn: ...").
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "plugins/spank/spank_contexts.hpp"
#include "plugins/spank/spank_env.hpp"

extern "C" {
// Declared extern first: a const object at namespace scope would otherwise get internal
// linkage in C++, and Slurm's plugin loader looks these four up by name.
extern const char plugin_name[];
extern const char plugin_type[];
extern const unsigned int plugin_version;
extern const unsigned int spank_plugin_version;
SPANK_PLUGIN(axonn, 1)
}

namespace axonn::spank {
namespace {

// In srun, why the step was refused also goes to the file the user's AXONN_REFUSAL_FILE
// names (spank_env.hpp), so a batch script can tell a refused step from a failed run.
void report_refusal(const std::string& message) {
  slurm_error("axonn: %s", message.c_str());
  if (spank_context() != S_CTX_LOCAL) return;
  const char* path = std::getenv(kEnvRefusalFile);
  if (!path || !*path) return;
  if (std::FILE* f = std::fopen(path, "w")) {
    std::fprintf(f, "%s\n", message.c_str());
    std::fclose(f);
  }
}

template <typename F>
int guarded(const char* where, F&& body) noexcept {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    report_refusal(e.what());
  } catch (...) {
    report_refusal(std::string("unexpected failure in ") + where);
  }
  return -1;
}

bool runs_here(spank_context_t context) {
  return context == S_CTX_LOCAL || context == S_CTX_REMOTE || context == S_CTX_ALLOCATOR;
}

// Slurm calls this while it parses options: in srun and sbatch/salloc for the command line and
// for an sbatch option passed on through the job's environment to the script's srun (remote=0);
// in slurmstepd (remote=1), where a failure is only logged, so remote_task_init checks again.
int option_callback(int /*val*/, const char* optarg, int remote) {
  if (remote) return 0;
  return guarded("the --axonn-layout option", [&] { check_option_value(optarg); });
}

char option_name[] = "axonn-layout";
char option_arginfo[] = "auto|validate|off|DxXxYxZ";
char option_usage[] =
    "4D parallel layout (data x X x Y x Z) for axonn: auto = chosen by the site's cost model for the job TOML on the "
    "command line; validate = check AXONN_LAYOUT; DxXxYxZ[eN][:ORDER] = this layout (eN: expert parallelism N), "
    "checked; off = leave it alone";
struct spank_option option = {option_name, option_arginfo, option_usage, 1, 0, option_callback};

}  // namespace

PluginConfig& plugin_config() {
  static PluginConfig config;
  return config;
}

struct spank_option* layout_option() {
  return &option;
}

}  // namespace axonn::spank

int slurm_spank_init(spank_t sp, int ac, char** av) {
  using namespace axonn::spank;
  // slurmd and prolog/epilog contexts load the plugin too (it has an init); nothing to do there.
  if (!runs_here(spank_context())) return 0;
  return guarded("slurm_spank_init", [&] {
    plugin_config() = parse_plugstack_args(ac, av);
    if (const spank_err_t rc = spank_option_register(sp, layout_option()); rc != ESPANK_SUCCESS)
      throw SpankError(std::string("registering --axonn-layout failed: ") + spank_strerror(rc));
  });
}

int slurm_spank_local_user_init(spank_t sp, int /*ac*/, char** /*av*/) {
  return axonn::spank::guarded("slurm_spank_local_user_init", [&] { axonn::spank::local_user_init(sp); });
}

int slurm_spank_task_init(spank_t sp, int /*ac*/, char** /*av*/) {
  if (spank_remote(sp) != 1) return 0;
  return axonn::spank::guarded("slurm_spank_task_init", [&] { axonn::spank::remote_task_init(sp); });
}
