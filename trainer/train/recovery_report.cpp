#include "trainer/train/recovery_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "config/config_error.hpp"
#include "core/json_text.hpp"
#include "core/wall_clock.hpp"

namespace axonn {
namespace {

double phase_s(const StartupTimes& startup, const std::string& phase) {
  for (const auto& [name, seconds] : startup.phases())
    if (name == phase) return seconds;
  throw std::logic_error("recovery_report: startup phase '" + phase + "' was not marked");
}

}  // namespace

std::optional<RecoveryTimes> recovery_times_from_environment() {
  const char* restart = std::getenv("AXONN_RESTART");
  const char* recovery = std::getenv("AXONN_RECOVERY");
  if (restart == nullptr || recovery == nullptr) return std::nullopt;
  RecoveryTimes t;
  std::istringstream in(std::string(restart) + " " + recovery);
  std::string rest;
  if (!(in >> t.restart >> t.failed_unix_s >> t.ended_unix_s) || (in >> rest) || t.restart < 0 ||
      t.ended_unix_s < t.failed_unix_s)
    throw ConfigError(std::string("AXONN_RESTART=") + restart + " AXONN_RECOVERY=" + recovery +
                      " cannot be read: expected a restart count and \"FAILED_UNIX_S ENDED_UNIX_S\" (a launcher sets "
                      "them; unset both to start without a recovery report)");
  if (t.restart == 0) return std::nullopt;
  return t;
}

void note_failure(const std::filesystem::path& run_dir, int rank) {
  std::error_code ec;
  const std::filesystem::path dir = run_dir / "failures";
  std::filesystem::create_directories(dir, ec);
  std::ofstream(dir / fmt::format("rank-{:05d}", rank)) << fmt::format("{:.6f}\n", unix_seconds_now());
}

std::optional<FailureNote> take_failure_notes(const std::filesystem::path& run_dir) {
  const std::filesystem::path dir = run_dir / "failures";
  std::optional<FailureNote> earliest;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    FailureNote note;
    std::ifstream in(entry.path());
    if (name.rfind("rank-", 0) != 0 || !(in >> note.unix_s)) continue;  // half-written by a rank that died too
    note.rank = std::atoi(name.c_str() + 5);
    if (!earliest || note.unix_s < earliest->unix_s) earliest = note;
  }
  std::filesystem::remove_all(dir, ec);
  return earliest;
}

RecoveryTimes with_failure_note(RecoveryTimes times, const std::optional<FailureNote>& note) {
  if (note && note->unix_s < times.failed_unix_s) {
    times.failed_unix_s = note->unix_s;
    times.noticed_by = note->rank;
  }
  return times;
}

RecoveryReport recovery_report(const RecoveryTimes& times, const StartupTimes& startup, int64_t resumed_step,
                               std::optional<int64_t> last_logged_step) {
  const double start = startup.process_start_unix_s();
  const double communicators = phase_s(startup, "communicators");
  const double loaded = phase_s(startup, "checkpoint_loaded");
  const double first_step = phase_s(startup, "first_step");
  RecoveryReport r;
  r.restart = times.restart;
  r.failed_unix_s = times.failed_unix_s;
  r.noticed_by = times.noticed_by;
  r.total_s = start + first_step - times.failed_unix_s;
  r.phases = {{"stop", times.ended_unix_s - times.failed_unix_s},
              // The process start has clock-tick resolution (10 ms): a fast restart may read a hair below 0.
              {"restart", std::max(0.0, start - times.ended_unix_s)},
              {"startup", communicators},
              {"load", loaded - communicators},
              {"first_step", first_step - loaded}};
  r.resumed_step = resumed_step;
  if (last_logged_step) r.steps_redone = std::max<int64_t>(0, *last_logged_step - resumed_step);
  return r;
}

std::string describe_recovery(const RecoveryReport& r) {
  std::string phases;
  for (const auto& [name, seconds] : r.phases)
    phases += fmt::format("{}{} {:.2f} s", phases.empty() ? "" : ", ", name, seconds);
  return fmt::format(
      "restart {}: {:.2f} s from the failure{} to the first step ({}); resumed from step {}, {}", r.restart, r.total_s,
      r.noticed_by ? fmt::format(" (noticed by rank {})", *r.noticed_by) : std::string(), phases, r.resumed_step,
      r.steps_redone ? fmt::format("{} step(s) done again", *r.steps_redone)
                     : std::string("no metrics.jsonl to count the steps done again"));
}

std::string recovery_json(const RecoveryReport& r) {
  std::string j = "{\"restart\": " + std::to_string(r.restart) + ", \"total_s\": " + json_number(r.total_s);
  j += ", \"failed_unix_s\": " + fmt::format("{:.6f}", r.failed_unix_s);
  if (r.noticed_by) j += ", \"noticed_by_rank\": " + std::to_string(*r.noticed_by);
  for (const auto& [name, seconds] : r.phases) j += ", " + json_string(name + "_s") + ": " + json_number(seconds);
  j += ", \"resumed_step\": " + std::to_string(r.resumed_step);
  if (r.steps_redone) j += ", \"steps_redone\": " + std::to_string(*r.steps_redone);
  return j + "}";
}

}  // namespace axonn
