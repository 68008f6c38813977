#pragma once
// The trainer's side of a rank's timeline (core/trace_recorder.hpp): the backend's ops while
// the recorder is active (the steps of run.trace_steps), and spans of the step's phases.
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_clock.hpp"
#include "core/number_text.hpp"
#include "core/trace_recorder.hpp"
#include "trainer/observed_backend.hpp"

namespace axonn {

// Each op of an ObservedBackend as an event (category "op"), while `trace` is active; GEMMs
// carry their FLOPs. On the CPU an op is timed by the host clock, on the calling thread's
// track. On a device backend it is timed by marks on the device's stream (no waiting per op)
// and put on the track "device stream": begin_step and end_step bracket a traced step, each
// waiting for the device once, and end_step places the step's ops on the host's clock from
// the mark begin_step took when the device was idle.
class TraceOps final : public OpObserver {
 public:
  explicit TraceOps(TraceRecorder& trace) : trace_(trace) {}
  bool observing() const override { return trace_.active(); }
  void op(const std::string& name, double flops, Clock::time_point start, Clock::time_point end) override {
    trace_.span("op", name, start, end, flops_args(flops), "", /*recent=*/false);
  }

  bool takes_device_marks() const override { return true; }
  void device_op(const std::string& name, double flops, std::unique_ptr<TimingMark> start,
                 std::unique_ptr<TimingMark> end) override {
    pending_.push_back({name, flops, std::move(start), std::move(end)});
  }
  // Before a traced step: the device idle, its mark taken with the host's time.
  void begin_step(Backend& device) {
    device.synchronize();
    reference_ = device.timing_mark();
    reference_time_ = Clock::now();
  }
  // After it: the device's ops of the step as events, then forgotten.
  void end_step(Backend& device) {
    if (reference_ && !pending_.empty()) {
      device.synchronize();
      for (const Pending& p : pending_) {
        const auto at = [&](const TimingMark& mark) {
          return reference_time_ + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(mark.seconds_since(*reference_)));
        };
        trace_.span("op", p.name, at(*p.start), at(*p.end), flops_args(p.flops), "device stream", /*recent=*/false);
      }
    }
    pending_.clear();
    reference_.reset();
  }

 private:
  struct Pending {
    std::string name;
    double flops;
    std::unique_ptr<TimingMark> start, end;
  };
  static TraceRecorder::Args flops_args(double flops) {
    if (flops <= 0) return {};
    return {{"flops", std::to_string(static_cast<long long>(flops))}};
  }

  TraceRecorder& trace_;
  std::vector<Pending> pending_;
  std::unique_ptr<TimingMark> reference_;
  Clock::time_point reference_time_;
};

// A span from construction to destruction on the calling thread's track: a phase of the step
// ("data", "forward_backward", "optimizer"), with the thread's CPU time in it (thread_cpu_us;
// on the CPU backend the pool's other threads are not counted). Nothing when `trace` is null.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* trace, const char* category, std::string name, TraceRecorder::Args args = {})
      : trace_(trace),
        category_(category),
        name_(std::move(name)),
        args_(std::move(args)),
        start_(TraceRecorder::Clock::now()),
        start_cpu_s_(trace != nullptr ? thread_cpu_seconds() : 0) {}
  ~TraceSpan() {
    if (trace_ == nullptr) return;
    const auto end = TraceRecorder::Clock::now();
    args_.emplace_back("thread_cpu_us", format_number("%.1f", (thread_cpu_seconds() - start_cpu_s_) * 1e6));
    trace_->span(category_, std::move(name_), start_, end, std::move(args_));
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  TraceRecorder* trace_;
  const char* category_;
  std::string name_;
  TraceRecorder::Args args_;
  TraceRecorder::Clock::time_point start_;
  double start_cpu_s_;
};

}  // namespace axonn
