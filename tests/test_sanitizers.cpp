// The AXONN_SANITIZE build as its tests depend on it: a finding in a child process (the
// ranks, workers and `axonn` runs of the mp tests are child processes) aborts that process,
// so the test sees a signal instead of an exit code it might expect; memory leaked by our
// code is a finding; a clean process exits 0, so the options and the suppressions file parse.
#include <gtest/gtest.h>

#include <string>

#include "process_helpers.hpp"

namespace axonn::test {
namespace {

constexpr int kAborted = 128 + 6;  // SIGABRT, as run_command reports a signal

CommandResult run_canary(const std::string& mode) { return run_command(std::string(AXONN_SANITIZER_CANARY) + " " + mode); }

TEST(Sanitizers, ACleanProcessExitsZero) {
  const CommandResult r = run_canary("clean");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(Sanitizers, AHeapOverflowAbortsTheProcess) {
  const CommandResult r = run_canary("heap-overflow");
  EXPECT_EQ(r.code, kAborted) << r.output;
  EXPECT_TRUE(contains(r.output, "ERROR: AddressSanitizer: heap-buffer-overflow")) << r.output;
}

TEST(Sanitizers, UndefinedBehaviourAbortsTheProcess) {
  const CommandResult r = run_canary("undefined");
  EXPECT_EQ(r.code, kAborted) << r.output;
  EXPECT_TRUE(contains(r.output, "runtime error: signed integer overflow")) << r.output;
}

TEST(Sanitizers, ALeakAbortsTheProcessAtExit) {
  const CommandResult r = run_canary("leak");
  EXPECT_EQ(r.code, kAborted) << r.output;
  EXPECT_TRUE(contains(r.output, "ERROR: LeakSanitizer: detected memory leaks")) << r.output;
}

}  // namespace
}  // namespace axonn::test
