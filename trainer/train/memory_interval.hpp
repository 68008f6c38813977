#pragma once
// When memory copies run (checkpoint.memory_interval): every K steps, K fixed by the job, or
// with "auto" measured by the run, as CheckFreq (FAST '21) tunes its checkpoint frequency to
// an overhead bound: the run makes a few copies, each once the one before has ended and a step
// has run with none beside it, measures what they cost (their pauses, and how much slower
// every step beside their writing and sending ran than the steps with none), and then copies
// every K steps, the fewest that keep the copies within kMemoryCopyBudget of training time.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace axonn {

// The share of training time the copies may take: the recovery's promise that copying the
// state to memory does not slow a step by more than 2%.
inline constexpr double kMemoryCopyBudget = 0.02;

// What a copy cost, as a rank measured it over the calibration copies.
struct CopyCost {
  double step_s = 0;        // a training step with no copy beside it (their mean)
  double pause_s = 0;       // training paused while the state was copied into host buffers (mean)
  double slowdown_s = 0;    // how much longer, together, the steps beside one copy's background took (mean)
  double slowdown_bound_s = 0;  // the most that slowdown can be, at 95% confidence, given how the steps vary
  double background_s = 0;  // the copy's writing and sending after the pause, beside training (longest)
};

// The fewest steps between copies that keep what a copy costs training (its pause, and the
// slowdown of the steps beside it: on the CPU backend the cores write and send instead of
// computing, taken at its bound, so steps that vary more than a copy slows them do not pass
// for a cheap copy) within the budget of the steps between them, and let each copy end before
// the next one starts (a save waits for the copy before it): at least 1.
int memory_interval_for(const CopyCost& cost);

// "a copy paused training 0.3 ms, slowed the steps beside it by 9.5 ms (at most 14.1 ms at 95%
// confidence) and wrote and sent for 12.0 ms, with steps of 165.2 ms": the measurement the
// choice was made from, for the log.
std::string describe_copy_cost(const CopyCost& cost);

// The one-sided 95% quantile of Student's t distribution with `dof` degrees of freedom: how
// many standard errors above a mean of few samples its true value may lie. A textbook table to
// 30, `dof` rounded down to a whole degree and taken as 30 beyond, each of which errs wide (at
// most 3% wider than the 1.645 of infinitely many).
double student_t_95(double dof);

// "steps 2, 4, 6 and 8": the steps after which "auto"'s calibration copies ran, for the log.
std::string describe_copy_steps(const std::vector<int64_t>& steps);

// "every 5 steps", or for "auto" (nullopt) what the run will do.
std::string describe_memory_interval(std::optional<int> fixed);

// What a step measures for "auto"'s calibration.
enum class CalibrationStep {
  none,          // not calibrating, or the run's first step (the slowest: warm-up)
  without_copy,  // no copy was written or sent beside it, on any rank
  beside_copy,   // a calibration copy was written or sent beside it, on some rank
};

// Which steps end with a memory copy. A fixed interval K copies after every step that is a
// multiple of K. "auto" calibrates first, driven by boundary() after every step: it makes
// kCalibrationCopies copies, the first after the run's 2nd step (the 1st is the slowest), each
// next one once every rank's copy before has ended and a step has run with none beside it
// (a copy whose writing and sending outlasts a step is measured over every step it slows,
// and none of them is taken for a step without a copy); once the last has ended the ranks
// agree on K (deciding(), decide()) and copy every K steps after the last calibration copy.
// Every rank drives its schedule with the same agreed inputs, so they copy after the same steps.
class MemoryCopySchedule {
 public:
  static constexpr int kCalibrationCopies = 4;

  // configured: checkpoint.memory_interval (> 0), or nullopt for "auto"; start_step: the step
  // the run resumed from (0 for a fresh one).
  MemoryCopySchedule(std::optional<int> configured, int64_t start_step);

  // "auto", still calibrating: call after each step (`step` done), with whether any rank's copy
  // is still being written or sent (the ranks agree on it); returns what that step measures.
  // Then ask deciding() and due() about the same step.
  CalibrationStep boundary(int64_t step, bool copy_running);
  // Whether "auto" still calibrates (boundary() is due after every step).
  bool calibrating() const { return automatic_ && !interval_; }

  // Whether a copy is due after `step` (done).
  bool due(int64_t step) const;
  // "auto": whether the ranks measure and agree on the interval after `step` (decide()): the
  // last calibration copy has ended. Never for a fixed interval.
  bool deciding(int64_t step) const {
    return calibrating() && copy_steps_.size() == kCalibrationCopies && boundary_step_ == step &&
           copy_steps_.back() < step && !copy_running_;
  }
  void decide(int interval) { interval_ = interval; }
  // The interval in use; nullopt while "auto" calibrates.
  std::optional<int> interval() const { return interval_; }
  // With an interval in use: the first step from `step` on after which a copy is due.
  int64_t next_copy(int64_t step) const;
  // "auto": the steps after which the calibration copies ran, so far.
  const std::vector<int64_t>& calibration_copies() const { return copy_steps_; }

 private:
  std::optional<int> interval_;
  bool automatic_ = false;
  int64_t start_step_ = 0;
  // "auto", calibrating: the state at the last boundary() and what the step after it measures.
  int64_t boundary_step_ = -1;
  bool copy_running_ = false;
  std::vector<int64_t> copy_steps_;  // the calibration copies' steps (the last: due now or done)
  CalibrationStep next_ = CalibrationStep::none;
};

// "auto": the step times the calibration measures, the steps with no copy beside them and
// those beside one. A step beside a disk save's writing is left out of both (the writer slows
// it too, and that is not the copy's cost), unless that would leave a side with none.
class CopyCalibration {
 public:
  void add(CalibrationStep kind, double step_s, bool beside_disk_save);
  double step_s() const;  // the steps with no copy beside them: their mean
  // What one copy's steps took longer together: the steps beside a copy per copy made, times
  // their mean less step_s().
  double slowdown_s(int copies) const;
  // The same with the difference of the means at its 95% upper bound (Welch's: each side's
  // spread over its count, Student's t at the degrees of freedom they give). With a side of
  // fewer than 2 steps there is no spread to bound by: the mean difference.
  double slowdown_bound_s(int copies) const;

 private:
  struct Sample {
    double sum = 0, sum_squares = 0;
    int n = 0;
    void add(double s) { sum += s, sum_squares += s * s, ++n; }
    double mean() const { return n > 0 ? sum / n : 0.0; }
    double variance() const;  // unbiased; 0 below 2 samples
  };
  bool clean() const { return without_.n > 0 && beside_.n > 0; }
  const Sample& without() const { return clean() ? without_ : without_all_; }
  const Sample& beside() const { return clean() ? beside_ : beside_all_; }
  Sample without_, beside_;          // the steps beside no disk save
  Sample without_all_, beside_all_;  // every step
};

}  // namespace axonn
