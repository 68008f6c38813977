// axonn train JOB.toml [--site S] [--layout L] [--fallback] [--data-changed] [--break-lock] [--timeout-ms N] [--trace-steps A-B]
//                      [section.key=value ...]
// One rank of a training run, under `axonn run -n N`, `srun --mpi=pmix` or `mpirun`: reads
// the site (--site, else AXONN_SITE_CONFIG, else the built-in laptop-cpu site;
// cli/train_inputs.hpp), the job and its data before anything else, then the topology from
// PMIx, decides the layout (cli/run_layout.hpp), connects the communicators and trains
// (trainer/train/training_run.hpp), resuming from the job's checkpoint directory when it
// holds a step. The job's run.preempt_signal (SIGUSR1 unless set), SIGTERM and SIGINT ask for
// a stop at the next step boundary: the ranks save, commit and exit with exit_code::preempted.
// Each rank computes where training.device says (cli/train_device.hpp: the CUDA backend with
// NCCL, or the CPU backend with Gloo). Rank 0 logs that choice, the layout, the link tier
// each axis's groups span, and when each startup phase was reached (also in summary.json's
// "startup", for bench/launch.cpp); every GPU rank logs its GPU.
#include <spdlog/spdlog.h>

#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "comm/comm_grid.hpp"
#include "config/site_config.hpp"
#include "core/exit_codes.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_report.hpp"
#include "runner/cli/args.hpp"
#include "runner/cli/commands.hpp"
#include "runner/cli/environment.hpp"
#include "runner/cli/newest_checkpoint.hpp"
#include "runner/cli/run_layout.hpp"
#include "runner/cli/train_device.hpp"
#include "runner/cli/train_inputs.hpp"
#include "runner/pmix/topology.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/train/startup_times.hpp"
#include "trainer/train/training_run.hpp"

namespace axonn {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal) { g_stop_signal = signal; }

// Until the job says which preemption signal it takes, every one it could name stops the run;
// then the other two get their default action back (before NCCL, which may want SIGUSR1).
void install_stop_handlers(const std::vector<int>& signals) {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : signals) sigaction(s, &sa, nullptr);
}

void keep_only_preempt_signal(int preempt_signal) {
  for (const std::string& name : kPreemptSignals)
    if (const int s = preempt_signal_number(name); s != preempt_signal) std::signal(s, SIG_DFL);
}

// Which links each axis's groups cross under this layout's placement, as the chooser priced
// them: "x groups of 2 over intra-node links, data groups of 2 over inter-node links (2
// nodes x 4 ranks)", the expert axes included. Tells a user which axes stayed inside a node.
std::string axis_links(const RunLayout& run) {
  std::string s;
  for (const CommAxis axis :
       {CommAxis::x, CommAxis::y, CommAxis::z, CommAxis::data, CommAxis::expert, CommAxis::expert_data}) {
    const int size = run.layout.comm_size(axis);
    if (size <= 1) continue;
    s += std::string(s.empty() ? "" : ", ") + comm_axis_name(axis) + " groups of " + std::to_string(size) + " over " +
         link_tier_name(axis_link(run.plan.machine, run.layout, axis)) + " links";
  }
  if (s.empty()) s = "none (one rank)";
  return s + " (priced as " + std::to_string(run.plan.machine.nodes) + " node(s) x " +
         std::to_string(run.plan.machine.tasks_per_node) + " ranks)";
}

// How often Slurm has requeued this job (SLURM_RESTART_COUNT, unset before the first requeue).
// What names this job's memory copies across its restarts (memory_job_dir): the key `axonn
// run` gives its ranks, else the Slurm job id, else (no restarts) the PMIx namespace.
std::string memory_job_key(const Topology& topology) {
  if (const auto key = environment("AXONN_MEMORY_KEY")) return *key;
  if (const auto job = environment("SLURM_JOB_ID")) return *job;
  return topology.nspace;
}

int64_t slurm_restart_count() {
  const std::string text = environment("SLURM_RESTART_COUNT").value_or("");
  int64_t count = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  return ec == std::errc() && end == text.data() + text.size() ? count : 0;
}

}  // namespace

const std::vector<OptionSpec>& train_option_specs() {
  static const std::vector<OptionSpec> specs = {
      {"site", true,
       "site config TOML; wins over AXONN_SITE_CONFIG (default: that, else the built-in laptop-cpu site)"},
      {"layout", true, "DxXxYxZ[eN][:order] (default: AXONN_LAYOUT, else the chooser)"},
      {"fallback", false, "resume from an older committed step when the newest cannot be loaded"},
      {"data-changed", false,
       "resume on other [data] than the checkpoint was trained on (another mixture or file): logged, not refused"},
      {"break-lock", false,
       "take over the checkpoint directory's lock left by a run on another host that is gone (its node failed)"},
      {"init-only", false, "write the initial weights as checkpoint step 0 and exit (no training)"},
      {"print-preempt-signal", false,
       "print the job's run.preempt_signal (USR1, USR2 or HUP) and exit; starts nothing"},
      {"print-restart-policy", false,
       "print the job's run.max_restarts and run.spare_nodes (\"2 1\") and exit; starts nothing"},
      {"print-newest-checkpoint", false,
       "print which step of checkpoint.dir a resume would start from, in one line, and exit; starts nothing"},
      {"timeout-ms", true, "collective timeout (default 300000)"},
      {"trace-steps", true,
       "steps whose timeline every rank writes to <run.dir>/trace/rank-NNNNN.json, e.g. 10-12 (run.trace_steps)"},
      {"help", false, "this help"},
  };
  return specs;
}

int command_train(const CommandArgs& argv) {
  const std::vector<OptionSpec>& specs = train_option_specs();
  const char* const usage =
      "axonn train JOB.toml [options] [section.key=value ...]   (under axonn run, srun --mpi=pmix or mpirun)";
  const std::optional<Args> parsed = parse_or_usage(argv, specs, usage);
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().empty()) {
    print_usage(usage, specs);
    return exit_code::bad_input;
  }
  spdlog::set_pattern("[%l] %v");
  StartupTimes startup = StartupTimes::since_process_start();
  // First, so a preemption signal during startup (a requeued job preempted again at once)
  // stops the run at its first step boundary with a checkpoint instead of killing the rank.
  install_stop_handlers({SIGUSR1, SIGUSR2, SIGHUP, SIGTERM, SIGINT});

  // The job before PMIx: a bad one is exit 2 under any launcher, and without a server too.
  const TrainInputs inputs = load_train_inputs(args);
  const JobConfig& job = inputs.job;
  const SiteConfig& site = inputs.site.config;
  if (args.has("print-preempt-signal")) {
    std::printf("%s\n", job.run.preempt_signal.c_str());
    return exit_code::ok;
  }
  if (args.has("print-restart-policy")) {  // for the sbatch templates' restarts inside the allocation
    std::printf("%d %d\n", job.run.max_restarts, job.run.spare_nodes);
    return exit_code::ok;
  }
  if (args.has("print-newest-checkpoint")) {  // for the templates' refused restart
    std::printf("%s\n", newest_checkpoint(job).c_str());
    return exit_code::ok;
  }
  check_wrapper_preempt_signal(inputs);
  const std::optional<RecoveryTimes> recovery =
      recovery_times_from_environment();  // a restart's launcher says when it failed
  keep_only_preempt_signal(preempt_signal_number(job.run.preempt_signal));

  PmixClient client;
  startup.mark("pmix_init");
  const Topology topology = topology_from_pmix(client);
  startup.mark("topology");
  const bool lead = topology.rank == 0;  // rank 0 narrates; every rank reports its memory
  if (lead) {
    spdlog::info("{}", inputs.site.chosen_by);
    spdlog::info("stop signals: SIG{} (run.preempt_signal), SIGTERM, SIGINT: save at the next step boundary, exit {}",
                 job.run.preempt_signal, exit_code::preempted);
    std::fflush(stdout);
  }

  const TrainDevice device = choose_train_device(job, topology);
  // The chooser and the predictions price the device the ranks run on: "auto" resolved.
  JobConfig priced = job;
  priced.training.device = device.cuda ? "cuda" : "cpu";
  const RunLayout run = decide_run_layout(topology, site, priced, args.value("layout"));
  auto backend = make_train_backend(device, job, topology);
  const TrainingData data = load_train_data(job);
  startup.mark("layout");
  if (lead) {
    spdlog::info("axonn train {}: {} ranks on {} node(s), site {}, {}", job.source, topology.world, topology.nodes,
                 site.name, describe_train_device(device, job));
    spdlog::info("device: {}", device.decided_by);
    spdlog::info("layout {} (data x X x Y x Z, rank order fastest first {}) from {}", format_layout(run.layout),
                 format_order(run.layout), run.origin);
    spdlog::info("layout links: {}", axis_links(run));
    if (run.ranking) std::fputs(format_ranked_table(*run.ranking, 5).c_str(), stdout);
    std::fflush(stdout);
  }

  const auto timeout =
      std::chrono::milliseconds(args.integer("timeout-ms", kTimeoutMsMin, kTimeoutMsMax).value_or(300'000));
  const bool single_host = topology.nodes == 1 || std::getenv("AXONN_LAUNCHER") != nullptr;
  if (device.cuda) {
    spdlog::info("rank {} on {}: {}", topology.rank, topology.hostname(), describe_train_device(device, job));
    std::fflush(stdout);
  }
  CommGrid grid(client, run.layout, timeout, single_host, device.collectives);
  // NCCL's collectives run on their own streams: each one is put between the compute
  // kernels around it, so the model issues them as it does on Gloo (comm_grid.hpp).
  grid.order_with_compute(train_compute_stream(*backend));
  startup.mark("communicators");

  TrainingRunOptions options;
  options.plan = run.plan;
  // The run checks its bytes and memory against the layout model for what the trainer keeps
  // and moves: activations and the GEMMs' weights in the backend's activation type (bf16 on
  // a CUDA backend under training.dtype = "bfloat16", else float32), gradients float32.
  options.plan.batch.dtype = backend->activation_type();
  options.layout_origin = run.origin;
  options.fallback = args.has("fallback");
  options.data_changed = args.has("data-changed");
  options.init_only = args.has("init-only");
  options.lock_owner = LockOwner::this_process(environment("SLURM_JOB_ID").value_or(""), slurm_restart_count());
  options.break_lock = args.has("break-lock");
  options.save_token = topology.nspace;
  options.stop_requested = [] { return g_stop_signal != 0; };
  options.startup = std::move(startup);
  options.recovery = recovery;
  for (const int node : topology.node_of_rank)
    options.rank_hosts.push_back(topology.hostnames[static_cast<size_t>(node)]);
  std::unique_ptr<PeerLink> peers;
  if (job.checkpoint.memory_copies()) {
    peers = std::make_unique<PeerLink>(client, timeout, single_host, "memory-copies");
    options.peers = peers.get();
    options.memory = plan_memory_copies(
        topology.node_of_rank, topology.rank,
        memory_job_dir(job.checkpoint.memory_dir, memory_job_key(topology), job.checkpoint.dir) / topology.hostname());
  }
  const TrainingRunResult result = run_training(*backend, grid, job, data, options);
  return result.preempted ? exit_code::preempted : exit_code::ok;
}

}  // namespace axonn
