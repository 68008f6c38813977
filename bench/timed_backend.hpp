#pragma once
// A Backend that forwards every op to another backend and adds up the wall time of each
// (GEMMs per shape), for `bench_train_cpu --profile`: where a training step's time goes.
// Synchronizes after each op (ObservedBackend), so on a device backend it measures the op,
// not its launch.
#include <map>
#include <string>

#include "trainer/observed_backend.hpp"

namespace axonn::bench {

// Per-op totals of the ops observed since the last reset().
class OpTotals final : public OpObserver {
 public:
  struct Total {
    double seconds = 0;
    int64_t calls = 0;
    double flops = 0;  // GEMMs (with or without an epilogue) only
  };
  const std::map<std::string, Total>& totals() const { return totals_; }
  void reset() { totals_.clear(); }

  bool observing() const override { return true; }
  void op(const std::string& name, double flops, Clock::time_point start, Clock::time_point end) override {
    Total& t = totals_[name];
    t.seconds += std::chrono::duration<double>(end - start).count();
    ++t.calls;
    t.flops += flops;
  }

 private:
  std::map<std::string, Total> totals_;
};

// The backend and its totals together.
class TimedBackend {
 public:
  using Total = OpTotals::Total;
  explicit TimedBackend(Backend& inner) : backend_(inner, totals_) {}
  Backend& backend() { return backend_; }
  const std::map<std::string, Total>& totals() const { return totals_.totals(); }
  void reset() { totals_.reset(); }

 private:
  OpTotals totals_;
  ObservedBackend backend_;
};

}  // namespace axonn::bench
