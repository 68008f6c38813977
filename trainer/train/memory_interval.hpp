#pragma once
// When memory copies run (checkpoint.memory_interval): every K steps, K fixed by the job, or
// with "auto" measured by the run, as CheckFreq (FAST '21) tunes its checkpoint frequency to
// an overhead bound: the run copies after every other step a few times, measures what the
// copies cost (their pauses, and how much slower the steps beside them ran than the steps
// between), and then copies every K steps, the fewest that keep the copies within
// kMemoryCopyBudget of training time.
#include <cstdint>
#include <optional>
#include <string>

namespace axonn {

// The share of training time the copies may take: the recovery's promise that copying the
// state to memory does not slow a step by more than 2%.
inline constexpr double kMemoryCopyBudget = 0.02;

// What a copy cost, as a rank measured it over the calibration copies.
struct CopyCost {
  double step_s = 0;        // a training step with no copy beside it (their mean)
  double pause_s = 0;       // training paused while the state was copied into host buffers (mean)
  double slowdown_s = 0;    // how much longer the steps beside a copy's background took (mean)
  double background_s = 0;  // the copy's writing and sending after the pause, beside training (longest)
};

// The fewest steps between copies that keep what a copy costs training (its pause, and the
// slowdown of the step beside it: on the CPU backend the cores write and send instead of
// computing) within the budget of the steps between them, and let each copy end before the
// next one starts (a save waits for the copy before it): at least 1.
int memory_interval_for(const CopyCost& cost);

// "a copy paused training 0.3 ms, slowed the step beside it by 9.5 ms and wrote and sent for
// 12.0 ms, with steps of 165.2 ms": the measurement the choice was made from, for the log.
std::string describe_copy_cost(const CopyCost& cost);

// "every 5 steps", or for "auto" (nullopt) what the run will do.
std::string describe_memory_interval(std::optional<int> fixed);

// Which steps end with a memory copy. A fixed interval K copies after every step that is a
// multiple of K. "auto" calibrates first: it copies after the run's 2nd, 4th, 6th and 8th
// steps (the first step is the slowest), so that each copy's background runs beside the step
// after it and the steps before the copies run with none; after the 9th step the ranks agree
// on K (decide()), and copy every K steps after the last calibration copy.
class MemoryCopySchedule {
 public:
  static constexpr int kCalibrationCopies = 4;

  // configured: checkpoint.memory_interval (> 0), or nullopt for "auto"; start_step: the step
  // the run resumed from (0 for a fresh one).
  MemoryCopySchedule(std::optional<int> configured, int64_t start_step);

  // Whether a copy is due after `step` (done).
  bool due(int64_t step) const;
  // "auto", calibrating: whether `step` ran with no copy beside it (a calibration copy follows
  // it), or beside the background of the calibration copy made after the step before.
  bool calibrates_without_copy(int64_t step) const;
  bool calibrates_beside_copy(int64_t step) const;
  // "auto": whether `step` (done) ends the calibration, where the ranks measure and agree on
  // the interval (decide()). Never for a fixed interval.
  bool deciding(int64_t step) const { return automatic_ && !interval_ && step == last_calibration_ + 1; }
  // "auto": that step, for a run resumed from `start_step`; the steps after it copy as the rest
  // of the run will (what a benchmark times).
  static constexpr int64_t deciding_step(int64_t start_step) { return start_step + 2 * kCalibrationCopies + 1; }
  void decide(int interval) { interval_ = interval; }
  // The interval in use; nullopt while "auto" calibrates.
  std::optional<int> interval() const { return interval_; }

 private:
  bool calibrating(int64_t step) const { return automatic_ && !interval_ && step >= first_calibration_; }

  std::optional<int> interval_;
  bool automatic_ = false;
  int64_t first_calibration_ = 0;  // "auto": the steps after which the calibration copies run:
  int64_t last_calibration_ = 0;   // first, first + 2, ..., last
};

// "auto": the step times the calibration measures, the steps with no copy beside them and
// those beside one. A step beside a disk save's writing is left out of both (the writer slows
// it too, and that is not the copy's cost), unless that would leave a side with none.
class CopyCalibration {
 public:
  void add(const MemoryCopySchedule& schedule, int64_t step, double step_s, bool beside_disk_save);
  double step_s() const;      // the steps with no copy beside them: their mean
  double slowdown_s() const;  // the steps beside a copy: their mean, less step_s()

 private:
  struct Mean {
    double sum = 0;
    int n = 0;
    void add(double s) { sum += s, ++n; }
    double mean() const { return n > 0 ? sum / n : 0.0; }
  };
  bool clean() const { return without_.n > 0 && beside_.n > 0; }
  Mean without_, beside_;          // the steps beside no disk save
  Mean without_all_, beside_all_;  // every step
};

}  // namespace axonn
