// Time to choose a layout for 8 .. 16384 GPUs (every factorization x every axis order),
// against the 100 ms goal at 16384 GPUs on one core. Machine: DGX-H100-like numbers;
// model: GPT-2 1.3B-like (24 layers, hidden 2048, 16 heads, vocab 50304, T 2048).
#include "layout/layout_search.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_args.hpp"

int main(int argc, char** argv) {
  axonn::bench::parse_bench_args(argc, argv, {{"help", false, "this help"}}, "bench_layout_search",
                                 [](const axonn::Args& args) {
                                   axonn::bench::no_positionals(args);
                                   return 0;
                                 });
  axonn::ChooserInput in;
  in.model = {24, 2048, 16, 50304, 2048};
  in.batch = {4096, 4, axonn::ElementType::bfloat16};
  in.machine.tasks_per_node = 8;
  in.machine.peak_flops = 989e12;
  in.machine.compute_efficiency = 0.5;
  in.machine.memory_bytes = 80e9;
  in.machine.intra_node = {450e9, 2e-6};
  in.machine.inter_node = {50e9, 5e-6};
  in.machine.inter_switch = {25e9, 8e-6};
  in.machine.nodes_per_switch = 32;
  std::printf("%8s %12s %10s %12s %10s  %s\n", "GPUs", "candidates", "fitting", "ms/choice", "vs 100ms", "best");
  for (int gpus : {8, 512, 4096, 16384}) {
    in.machine.nodes = gpus / 8;
    std::vector<double> ms;
    axonn::ChooserResult r;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      r = axonn::choose_layout(in);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%8d %12zu %10zu %12.2f %9.2fx  %s\n", gpus, axonn::enumerate_layouts(gpus).size(), r.ranked.size(),
                ms[2], ms[2] / 100.0, r.fits() ? axonn::format_layout_with_order(r.best().layout).c_str() : "none");
  }
}
