// What tracing costs a training step, side by side in one run: one rank's trainer on the CPU
// backend (a small model whose step is many short ops, where a per-op cost shows most) with
//   plain:     the trainer on the backend itself (run.trace_steps unset);
//   observing: on the ObservedBackend that a job with run.trace_steps uses, in a step outside
//              the traced ones (the recorder inactive: one flag read per op);
//   tracing:   the same inside a traced step (every op timed and recorded as an event).
// Each round runs a few steps of each setting in turn; the step time of a setting is the
// median of its steps over all rounds. Prints each and its ratio to plain.
//
// usage: bench_trace [--rounds 5] [--steps 6] [model options, default: the tiny job's shape]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_cpu_job.hpp"
#include "bench_stats.hpp"
#include "comm/comm_grid.hpp"
#include "core/trace_recorder.hpp"
#include "solo_trainer.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/train/trace_ops.hpp"
#include "trainer/train/trainer.hpp"

using namespace axonn;
using namespace axonn::bench;

namespace {

const std::string kProgram = "bench_trace";

struct Setting {
  const char* name;
  Backend* backend;
  bool active;
  std::vector<double> steps;
};

}  // namespace

int main(int argc, char** argv) try {
  CpuJob defaults;
  defaults.model = {2, 64, 4, 256, 64};
  defaults.batch = 12;
  defaults.micro_batch = 4;
  defaults.rounds = 5;
  defaults.steps = 6;
  std::vector<OptionSpec> specs = cpu_job_options();
  const CpuJob o = parse_bench_args(argc, argv, specs, kProgram + " [options]",
                                    [&](const Args& args) { return read_cpu_job(args, defaults); });
  const JobConfig job = bench_train_job(kProgram, o.model, o.batch, o.micro_batch);
  const DataMixture data =
      DataMixture::single(std::make_shared<const TokenData>(builtin_corpus()), job.training.seed, job.model.sequence);

  CpuBackend cpu;
  TraceRecorder trace(0, "rank 0");
  TraceOps ops(trace);
  ObservedBackend observed(cpu, ops);
  SoloExchange exchange;
  CommGrid grid(exchange, Layout{}, std::chrono::seconds(10), true);
  grid.trace_into(&trace);  // as a training run does, traced steps or not
  // One trainer per backend, the same job: every setting runs the same steps' work.
  Trainer plain_trainer(cpu, grid, job, data), observed_trainer(observed, grid, job, data);
  plain_trainer.trace_into(&trace);
  observed_trainer.trace_into(&trace);

  std::vector<Setting> settings = {
      {"plain", &cpu, false, {}}, {"observing", &observed, false, {}}, {"tracing", &observed, true, {}}};
  auto trainer_of = [&](const Setting& s) -> Trainer& { return s.backend == &cpu ? plain_trainer : observed_trainer; };
  for (Setting& s : settings) trainer_of(s).train_step();  // warm-up: allocations, first-touch
  size_t events_per_step = 0;
  for (int round = 0; round < o.rounds; ++round) {
    for (Setting& s : settings) {
      for (int i = 0; i < o.steps; ++i) {
        const size_t before = trace.traced_events();
        trace.set_active(s.active);
        const auto start = Clock::now();
        trainer_of(s).train_step();
        s.steps.push_back(seconds_since(start));
        trace.set_active(false);
        if (s.active) events_per_step = trace.traced_events() - before;
      }
    }
  }
  std::printf(
      "%s: layers %d, hidden %d, heads %d, sequence %d, batch %d in micro-batches of %d; %d rounds of %d "
      "steps per setting\n",
      kProgram.c_str(), o.model.layers, o.model.hidden, o.model.heads, o.model.sequence, o.batch, o.micro_batch,
      o.rounds, o.steps);
  const double plain = median(settings[0].steps);
  for (const Setting& s : settings)
    std::printf("  %-10s step %8.3f ms (median)  %.3fx plain\n", s.name, 1e3 * median(s.steps),
                median(s.steps) / plain);
  std::printf("  a traced step recorded %zu events\n", events_per_step);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", kProgram.c_str(), e.what());
  return 1;
}
