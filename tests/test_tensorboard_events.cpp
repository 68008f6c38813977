// TensorBoard events files (trainer/train/tensorboard_events.hpp): the masked CRC-32C of the
// TFRecord framing against known values, and files written by TensorBoardEvents and
// MetricsLog read back here, record by record: framing, both CRCs, then each Event parsed
// with the classes protoc generates from tensorboard_event.proto.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/wall_clock.hpp"
#include "scratch_dir.hpp"
#include "trainer/train/metrics_log.hpp"
#include "trainer/train/tensorboard_event.pb.h"
#include "trainer/train/tensorboard_events.hpp"

namespace axonn {
namespace {

namespace fs = std::filesystem;
using TensorBoardFiles = test::ScratchDirTest;

uint32_t crc_of(const std::string& s) { return crc32c(s.data(), s.size()); }

// The standard check value and the iSCSI test vectors of RFC 3720 (appendix B.4).
TEST(Crc32c, GivesTheStandardCheckValueAndTheRfc3720Vectors) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up(32, '\0');
  std::string down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[static_cast<size_t>(i)] = static_cast<char>(i);
    down[static_cast<size_t>(i)] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc_of(up), 0x46DD794Eu);
  EXPECT_EQ(crc_of(down), 0x113FDB5Cu);
}

// Masked values computed independently (Python's crc32c module and the TFRecord formula).
TEST(Crc32c, MaskIsTfRecordsAndUnmaskUndoesIt) {
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
  EXPECT_EQ(mask_crc32c(crc_of("123456789")), 0xC78AB0E5u);
  EXPECT_EQ(mask_crc32c(crc_of(std::string(8, '\0'))), 0x07980329u);  // an empty record's length
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0x80000000u, 0xFFFFFFFFu, 0x12345678u}) {
    EXPECT_EQ(unmask_crc32c(mask_crc32c(crc)), crc) << crc;
    EXPECT_NE(mask_crc32c(crc), crc) << crc;
  }
}

uint64_t little_endian(const std::string& bytes, size_t at, int size) {
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return v;
}

// Every record of an events file, parsed; a failure names the record and what is wrong.
std::vector<tensorboard::Event> read_events(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string bytes = s.str();
  std::vector<tensorboard::Event> events;
  for (size_t at = 0; at < bytes.size();) {
    const std::string where = file.string() + " record " + std::to_string(events.size());
    if (bytes.size() - at < 12) {
      ADD_FAILURE() << where << ": " << bytes.size() - at << " bytes left, a record header has 12";
      break;
    }
    const uint64_t length = little_endian(bytes, at, 8);
    EXPECT_EQ(little_endian(bytes, at + 8, 4), mask_crc32c(crc32c(bytes.data() + at, 8))) << where << ": length CRC";
    if (bytes.size() - at - 12 < length + 4) {
      ADD_FAILURE() << where << ": length " << length << " runs past the end";
      break;
    }
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(little_endian(bytes, at + 12 + length, 4), mask_crc32c(crc_of(data))) << where << ": data CRC";
    tensorboard::Event event;
    EXPECT_TRUE(event.ParseFromString(data)) << where << ": not an Event";
    events.push_back(event);
    at += 12 + length + 4;
  }
  return events;
}

std::vector<fs::path> events_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

void expect_file_version(const tensorboard::Event& first, double not_before) {
  EXPECT_EQ(first.what_case(), tensorboard::Event::kFileVersion);
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_EQ(first.step(), 0);
  EXPECT_GE(first.wall_time(), not_before);
  EXPECT_LE(first.wall_time(), unix_seconds_now());
}

TEST_F(TensorBoardFiles, TheWriterPutsTheVersionFirstThenOneEventPerStep) {
  const double start = unix_seconds_now();
  fs::path written;
  {
    TensorBoardEvents events(dir_ / "run");
    written = events.path();
    events.write_scalars(1, 1700000000.25, {{"train/loss", 5.5}, {"perf/step_s", 0.125}});
    events.write_scalars(2, 1700000001.5, {{"train/loss", 0.1}, {"perf/step_s", 0}});
    events.write_scalars(3, 1700000002.75, {});
    // Flushed as written: a reader sees every step while the writer is still open.
    EXPECT_EQ(read_events(written).size(), 4u);
  }
  const std::regex name(R"(events\.out\.tfevents\.(\d+)\.(.+)\.(\d+))");
  std::smatch m;
  const std::string file_name = written.filename().string();
  ASSERT_TRUE(std::regex_match(file_name, m, name)) << file_name;
  EXPECT_NEAR(std::stod(m[1]), start, 5.0);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(m[2].str(), host);
  EXPECT_EQ(m[3].str(), std::to_string(getpid()));
  EXPECT_EQ(events_files(dir_ / "run"), std::vector<fs::path>{written});

  const auto events = read_events(written);
  ASSERT_EQ(events.size(), 4u);
  expect_file_version(events[0], std::floor(start));
  const double wall[] = {1700000000.25, 1700000001.5, 1700000002.75};
  for (int i = 1; i <= 3; ++i) {
    const tensorboard::Event& e = events[static_cast<size_t>(i)];
    EXPECT_EQ(e.step(), i);
    EXPECT_EQ(e.wall_time(), wall[i - 1]);
    EXPECT_EQ(e.what_case(), tensorboard::Event::kSummary);
  }
  const auto& first = events[1].summary();
  ASSERT_EQ(first.value_size(), 2);
  EXPECT_EQ(first.value(0).tag(), "train/loss");
  EXPECT_EQ(first.value(0).simple_value(), 5.5f);
  EXPECT_EQ(first.value(1).tag(), "perf/step_s");
  EXPECT_EQ(first.value(1).simple_value(), 0.125f);
  const auto& second = events[2].summary();
  ASSERT_EQ(second.value_size(), 2);
  EXPECT_EQ(second.value(0).simple_value(), 0.1f) << "float32 of the double";
  EXPECT_EQ(second.value(1).value_case(), tensorboard::Summary::Value::kSimpleValue) << "a 0 is written, not left out";
  EXPECT_EQ(second.value(1).simple_value(), 0.0f);
  EXPECT_EQ(events[3].summary().value_size(), 0);
}

// A second writer in the same directory, process and second gets a file of its own: TensorBoard
// merges them, and neither writer's records land inside the other's file.
TEST_F(TensorBoardFiles, ASecondWriterNeverAppendsToTheFirstsFile) {
  TensorBoardEvents a(dir_);
  TensorBoardEvents b(dir_);
  ASSERT_NE(a.path(), b.path());
  a.write_scalars(1, 1.0, {{"train/loss", 1}});
  b.write_scalars(1, 1.0, {{"train/loss", 2}});
  EXPECT_EQ(read_events(a.path()).size(), 2u);
  EXPECT_EQ(read_events(b.path()).size(), 2u);
  EXPECT_EQ(events_files(dir_).size(), 2u);
}

TEST_F(TensorBoardFiles, AnEventsFileThatCannotBeCreatedIsAnErrorNamingThePathAndTheFix) {
  const std::string blocked = write("not-a-directory", "x");  // a file where the run directory would be
  try {
    TensorBoardEvents events(fs::path(blocked) / "run");
    FAIL() << "created " << events.path();
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(blocked + "/run/events.out.tfevents."), std::string::npos) << what;
    EXPECT_NE(what.find("set run.dir to a writable directory"), std::string::npos) << what;
  }
}

StepMetrics step_metrics(int64_t step, bool moe) {
  StepMetrics m;
  m.step = step;
  m.loss = 5.25 - 0.5 * static_cast<double>(step);
  m.lr = 1e-3 * static_cast<double>(step);
  m.grad_norm = 0.75;
  m.tokens_per_s = 12345.5;
  m.flops_per_s = 3.5e12;
  m.mfu = 0.0625;
  m.step_s = 0.5;
  m.predicted_step_s = 0.25;
  m.elapsed_s = 1.5;
  m.cpu_s = 0.375;
  m.data_cursor = 24 * step;
  m.moe = moe;
  m.balance_loss = 1.125;
  m.dropped_fraction = 0.01;
  m.expert_load = 1.75;
  return m;
}

// MetricsLog writes each step twice: a metrics.jsonl line and an event with the same numbers,
// under the tags docs/tensorboard.md lists; an MoE step has the three routing scalars too.
TEST_F(TensorBoardFiles, MetricsLogWritesEveryStepToMetricsJsonlAndTheEventsFile) {
  const double start = unix_seconds_now();
  fs::path events_path;
  {
    MetricsLog log(dir_ / "run" / "metrics.jsonl");
    events_path = log.events_path();
    EXPECT_EQ(events_path.parent_path(), dir_ / "run");
    log.write(step_metrics(1, false));
    log.write(step_metrics(2, true));
  }
  std::ifstream jsonl(dir_ / "run" / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(jsonl, line);) ++lines;
  EXPECT_EQ(lines, 2);

  const auto events = read_events(events_path);
  ASSERT_EQ(events.size(), 3u);
  expect_file_version(events[0], std::floor(start));
  const std::vector<std::string> dense = {"train/loss",       "train/lr", "train/grad_norm", "perf/tokens_per_s",
                                          "perf/flops_per_s", "perf/mfu", "perf/step_s",     "perf/predicted_step_s",
                                          "perf/cpu_s"};
  std::vector<std::string> moe = dense;
  moe.insert(moe.end(), {"moe/balance_loss", "moe/dropped_fraction", "moe/expert_load"});
  for (int step = 1; step <= 2; ++step) {
    const tensorboard::Event& e = events[static_cast<size_t>(step)];
    const StepMetrics m = step_metrics(step, step == 2);
    EXPECT_EQ(e.step(), step);
    EXPECT_GE(e.wall_time(), events[0].wall_time());
    const std::vector<std::string>& tags = step == 2 ? moe : dense;
    const std::vector<double> values = {m.loss,        m.lr,           m.grad_norm,        m.tokens_per_s,
                                        m.flops_per_s, m.mfu,          m.step_s,           m.predicted_step_s,
                                        m.cpu_s,       m.balance_loss, m.dropped_fraction, m.expert_load};
    ASSERT_EQ(e.summary().value_size(), static_cast<int>(tags.size())) << "step " << step;
    for (size_t i = 0; i < tags.size(); ++i) {
      EXPECT_EQ(e.summary().value(static_cast<int>(i)).tag(), tags[i]) << "step " << step;
      EXPECT_EQ(e.summary().value(static_cast<int>(i)).simple_value(), static_cast<float>(values[i]))
          << "step " << step << " " << tags[i];
    }
  }
}

TEST_F(TensorBoardFiles, AMetricsFileThatCannotBeOpenedLeavesNoEventsFile) {
  fs::create_directories(dir_ / "run" / "metrics.jsonl");  // a directory where the file would be
  EXPECT_THROW(MetricsLog(dir_ / "run" / "metrics.jsonl"), std::runtime_error);
  EXPECT_TRUE(events_files(dir_ / "run").empty());
}

}  // namespace
}  // namespace axonn
