#pragma once
// Running `axonn train` from tests: a tiny job file, one run under the local launcher, and
// what a run leaves behind (metrics.jsonl, summary.json, the checkpoint's tensors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint/reader.hpp"
#include "checkpoint/step_dir.hpp"
#include "process_helpers.hpp"
#include "rank_processes.hpp"

namespace axonn::test {

// A GPT small enough for 8 ranks on 2 cores, whose dimensions every layout of 1, 2, 4 and
// 8 ranks divides: hidden 32 and heads 8 (G_y up to 8), global batch 24 (G_data*G_z up to 8,
// and 3 for the world-3 resume), byte-level vocabulary on the built-in corpus. On the CPU
// backend wherever the tests run (the oracle); GPU tests override training.device.
inline std::string tiny_job(int steps, int interval) {
  return "[model]\nlayers = 2\nhidden = 32\nheads = 8\nvocab = 256\nsequence = 16\n"
         "[training]\nglobal_batch = 24\nmicro_batch = 2\nsteps = " +
         std::to_string(steps) +
         "\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 2\nweight_decay = 0.1\ngrad_clip = 1.0\nseed = 5\n"
         "device = \"cpu\"\n"
         "[checkpoint]\ndir = \"ckpt\"\ninterval = " +
         std::to_string(interval) + "\nkeep = 4\n[run]\ndir = \"run\"\nlog_interval = 1\n";
}

// `job` with each `from` text replaced by its `to`; a `from` the job lacks is a test bug.
inline std::string with_replaced(std::string job, const std::vector<std::pair<std::string, std::string>>& edits) {
  for (const auto& [from, to] : edits) {
    const size_t at = job.find(from);
    if (at == std::string::npos) throw std::logic_error("with_replaced: the job has no '" + from + "'");
    job.replace(at, from.size(), to);
  }
  return job;
}

// A second source for data mixtures (docs/data.md): ~32 KB of numbered lines of letters in a
// rotating order, text unlike the built-in corpus, so a mixture's losses differ from its.
inline std::string other_text() {
  std::string text;
  for (int i = 0; i < 1000; ++i) {
    text += std::to_string(i * 7919 % 1000) + " ";
    for (int j = 0; j < 28; ++j) text.push_back(static_cast<char>('a' + (i * 5 + j * 3) % 26));
    text += "\n";
  }
  return text;
}

// A fresh directory under the build tree for one test, removed by the caller's TearDown.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(kBinaryDir) / "test-train" / (name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_file(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

// `axonn run -n N --nodes-sim K [LAUNCHER_OPTIONS] DIR/job.toml EXTRA` in `dir` with
// AXONN_LAYOUT set (empty: let the trainer decide); output and exit code. The job file's absolute path makes the
// launcher's command line unique to its test, so a test can signal its own launcher by name while other tests train
// beside it (see launcher_pattern).
inline CommandResult run_train(const std::filesystem::path& dir, int ranks, const std::string& layout,
                               const std::string& extra = "", int nodes_sim = 1, int timeout_s = 120,
                               const std::string& launcher_options = "") {
  std::string env = layout.empty() ? "" : "AXONN_LAYOUT=" + layout + " ";
  return run_command("cd " + dir.string() + " && " + env + kAxonn + " run -n " + std::to_string(ranks) +
                         " --nodes-sim " + std::to_string(nodes_sim) + " " + launcher_options + " " +
                         (dir / "job.toml").string() + " " + extra,
                     timeout_s);
}

// A `pkill -f` pattern for the launcher run_train starts in `dir` and for nothing else:
// anchored, since the sh and timeout wrappers' command lines contain the same words.
inline std::string launcher_pattern(const std::filesystem::path& dir, int ranks) {
  return "^" + kAxonn + " run -n " + std::to_string(ranks) + " .*" + (dir / "job.toml").string();
}

struct StepLine {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;  // before clipping: every gradient element counted once
  int64_t data_cursor = 0;
  std::optional<double> eval_loss;  // the held-out loss of a step that evaluated (run.eval_interval)
};

// The steps of <run_dir>/metrics.jsonl, in file order.
inline std::vector<StepLine> read_metrics(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<StepLine> out;
  const std::regex re(
      R"(\"step\": (\d+), \"loss\": ([-0-9.eE+]+),.*\"grad_norm\": ([-0-9.eE+]+),.*\"data_cursor\": (\d+))");
  const std::regex eval_re(R"(\"eval_loss\": ([-0-9.eE+]+))");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    out.push_back({std::stoll(m[1]), std::stod(m[2]), std::stod(m[3]), std::stoll(m[4]), std::nullopt});
    if (std::regex_search(line, m, eval_re)) out.back().eval_loss = std::stod(m[1]);
  }
  return out;
}

// Checks `condition` every 10 ms for up to 60 s; false, and a test failure saying `failure`,
// when it never held.
template <class Condition>
bool wait_until(Condition condition, const std::string& failure) {
  for (int i = 0; i < 6000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << failure << " within 60 s";
  return false;
}

// Once <dir>/run/metrics.jsonl has logged `after_steps` lines, SIGKILLs attempt `attempt` of
// the job's `ranks` (rank_processes.hpp) all at once; false, and a test failure, when they did
// not all run within 60 s.
inline bool kill_ranks(const std::filesystem::path& dir, const std::vector<int>& ranks, int attempt,
                       size_t after_steps) {
  std::vector<pid_t> pids;
  const bool running = wait_until(
      [&] {
        pids.clear();
        if (read_metrics(dir / "run").size() >= after_steps) pids = rank_pids(dir, ranks, attempt);
        return pids.size() == ranks.size();
      },
      "attempt " + std::to_string(attempt) + "'s ranks did not all run in " + dir.string());
  if (running) kill_all(pids);
  return running;
}

// Waits (up to 60 s) until <dir>/ckpt's `latest` names `step` or a later one: a test whose
// checks need a committed disk step kills only after it, since on a slow machine (sanitized,
// two ranks a core) a rank can log the steps after a save before its shard of it is written.
inline bool wait_for_committed(const std::filesystem::path& dir, int64_t step) {
  return wait_until([&] { return read_latest(dir / "ckpt").value_or(0) >= step; },
                    "no step from " + std::to_string(step) + " on was committed in " + (dir / "ckpt").string());
}

// A step's last line: a restarted run logs the steps it does again a second time.
inline std::vector<StepLine> last_of_each_step(const std::vector<StepLine>& steps) {
  std::vector<StepLine> out;
  for (const StepLine& s : steps) {
    while (!out.empty() && out.back().step >= s.step) out.pop_back();
    out.push_back(s);
  }
  return out;
}

// Every tensor of the checkpoint `latest` names, whole.
inline std::map<std::string, std::vector<float>> read_tensors(const std::filesystem::path& ckpt_dir) {
  CheckpointReader reader = CheckpointReader::open_latest(ckpt_dir);
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : reader.tensors()) {
    auto& v = out[t.name];
    const Rect all = full_rect(t.global_shape);
    v.resize(static_cast<size_t>(element_count(all)));
    reader.read(t.name, all, v.data());
  }
  return out;
}

// `to`/ckpt holding step `step` of `from`/ckpt, with `latest` naming it: a run in `to`
// resumes there. Returns `to`.
inline std::filesystem::path copy_checkpoint_step(const std::filesystem::path& from, int step,
                                                  const std::filesystem::path& to) {
  std::filesystem::create_directories(to / "ckpt");
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "step-%09d", step);
  std::filesystem::copy(from / "ckpt" / step_dir, to / "ckpt" / step_dir, std::filesystem::copy_options::recursive);
  write_file(to / "ckpt" / "latest", std::string(step_dir) + "\n");
  return to;
}

// Every tensor of `want` is in `got` with the same size and no element further than
// `tolerance` away; `what` names the comparison in failures.
inline void expect_same_tensors(const std::map<std::string, std::vector<float>>& got,
                                const std::map<std::string, std::vector<float>>& want, float tolerance,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    const auto& g = got.at(name);
    ASSERT_EQ(g.size(), w.size()) << what << " " << name;
    float worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
    EXPECT_LE(worst, tolerance) << what << ": " << name << " differs by up to " << worst;
  }
}

// What a finished run left in its folder DIR: the steps of DIR/run/metrics.jsonl, the
// tensors of the checkpoint DIR/ckpt/latest names (none where it saved none),
// DIR/run/summary.json, and the launcher's output where train_in started it.
struct TrainedRun {
  std::vector<StepLine> steps;
  std::map<std::string, std::vector<float>> tensors;
  std::string summary;
  std::string output;
};

inline TrainedRun read_run(const std::filesystem::path& dir) {
  TrainedRun run;
  run.steps = read_metrics(dir / "run");
  if (std::filesystem::exists(dir / "ckpt" / "latest")) run.tensors = read_tensors(dir / "ckpt");
  run.summary = read_text(dir / "run" / "summary.json");
  return run;
}

// `job` written to DIR/job.toml and trained in DIR by run_train; a run that does not exit 0
// fails the test, naming the layout and the overrides, and is read all the same.
inline TrainedRun train_in(const std::filesystem::path& dir, const std::string& job, int ranks,
                           const std::string& layout, const std::string& overrides = "", int nodes_sim = 1,
                           int timeout_s = 120) {
  std::filesystem::create_directories(dir);
  write_file(dir / "job.toml", job);
  const CommandResult r = run_train(dir, ranks, layout, overrides, nodes_sim, timeout_s);
  EXPECT_EQ(r.code, 0) << layout << " " << overrides << ":\n" << r.output;
  TrainedRun run = read_run(dir);
  run.output = r.output;
  return run;
}

// The same steps and data cursors, the losses within `loss_tolerance` and every tensor within
// `weight_tolerance` (both 0: bit for bit); `what` names the comparison in failures.
inline void expect_same_run(const TrainedRun& got, const TrainedRun& want, double loss_tolerance,
                            float weight_tolerance, const std::string& what) {
  ASSERT_EQ(got.steps.size(), want.steps.size()) << what;
  for (size_t i = 0; i < want.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].step, want.steps[i].step) << what;
    if (loss_tolerance == 0)
      EXPECT_EQ(got.steps[i].loss, want.steps[i].loss) << what << " step " << want.steps[i].step;
    else
      EXPECT_NEAR(got.steps[i].loss, want.steps[i].loss, loss_tolerance) << what << " step " << want.steps[i].step;
    // The norm's squares are summed in other groups across layouts and shardings, even where
    // the weights are the same bits: float32 rounding, far below what a gradient counted
    // twice or left out changes.
    EXPECT_NEAR(got.steps[i].grad_norm, want.steps[i].grad_norm, 1e-4 * want.steps[i].grad_norm)
        << what << " step " << want.steps[i].step << ": gradient norm";
    EXPECT_EQ(got.steps[i].data_cursor, want.steps[i].data_cursor) << what;
    // Held-out losses: where the reference evaluated, and as near as the training losses.
    EXPECT_EQ(got.steps[i].eval_loss.has_value(), want.steps[i].eval_loss.has_value()) << what;
    if (got.steps[i].eval_loss && want.steps[i].eval_loss) {
      if (loss_tolerance == 0)
        EXPECT_EQ(*got.steps[i].eval_loss, *want.steps[i].eval_loss) << what << " step " << want.steps[i].step;
      else
        EXPECT_NEAR(*got.steps[i].eval_loss, *want.steps[i].eval_loss, loss_tolerance)
            << what << " held-out loss at step " << want.steps[i].step;
    }
  }
  expect_same_tensors(got.tensors, want.tensors, weight_tolerance, what);
}

// The numbers of summary.json's per-rank array `key` (empty where it has none).
inline std::vector<double> summary_numbers(const std::string& summary, const std::string& key) {
  std::smatch m;
  std::vector<double> out;
  if (!std::regex_search(summary, m, std::regex("\"" + key + "\": \\[([^\\]]*)\\]"))) return out;
  std::stringstream list(m[1].str());
  for (std::string item; std::getline(list, item, ',');) out.push_back(std::stod(item));
  return out;
}

// AddressSanitizer's shadow memory, redzones and quarantine are in every rank's RSS: bounds on
// a run's measured memory hold for the plain build only.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// Flips one byte inside the stored data of `source` of `tensor` in step directory `step`
// (found in the shard file by its first bytes, read through the library), so only readers of
// that rectangle see a checksum mismatch.
inline void flip_stored_byte(const std::filesystem::path& step, const std::string& tensor, const StoredRect& source) {
  CheckpointReader reader(step);
  std::vector<float> data(static_cast<size_t>(element_count(source.rect)));
  reader.read(tensor, source.rect, data.data());
  const std::filesystem::path file = step / source.file;
  std::string bytes = read_text(file);
  const std::string needle(reinterpret_cast<const char*>(data.data()), std::min<size_t>(64, data.size() * 4));
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << tensor << " data not found in " << file;
  bytes[at + needle.size() / 2] = static_cast<char>(bytes[at + needle.size() / 2] ^ 0x10);
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace axonn::test
