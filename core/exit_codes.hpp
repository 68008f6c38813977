#pragma once
// Exit codes of the `axonn` executable, documented in README.md. Job templates
// and tests depend on these numbers: never renumber.
namespace axonn::exit_code {
inline constexpr int ok = 0;
inline constexpr int failure = 1;    // a run failed (worker died, I/O error, ...)
inline constexpr int bad_input = 2;  // bad arguments or config: nothing was started
inline constexpr int no_layout = 3;  // no parallel layout fits the job on these resources
// `axonn train` stopped early on a stop signal (run.preempt_signal, SIGTERM, SIGINT) after saving
// and committing a checkpoint: run it again (requeue) and it resumes. EX_TEMPFAIL of sysexits.h.
inline constexpr int preempted = 75;
}  // namespace axonn::exit_code
