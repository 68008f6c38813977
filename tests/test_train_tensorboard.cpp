// The TensorBoard events files of `axonn train` as users meet them (docs/tensorboard.md): a
// run of 2 ranks and its resume under the local launcher, each leaving an events file beside
// metrics.jsonl. tests/tensorboard_events_check.py reads them back without axonn's code (the
// TFRecord framing and CRCs in Python, the events decoded with the Python classes protoc
// generates from the same .proto) and compares every step and scalar with metrics.jsonl; it
// must also fail, on a flipped byte and on a value that differs from metrics.jsonl.
#include <gtest/gtest.h>

#include <cstdlib>

#include "train_helpers.hpp"

namespace axonn::test {
namespace {

namespace fs = std::filesystem;

class TrainTensorBoard : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("tensorboard"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

bool python_reads_events() {
  return std::system(
             "test -x /usr/bin/python3 && /usr/bin/python3 -c \"import crc32c, google.protobuf\" 2>/dev/null") == 0;
}

// The reader on `run_dir`, which must hold `files` events files.
CommandResult check_events(const fs::path& run_dir, int files) {
  return run_command("/usr/bin/python3 " + kSourceDir + "/tests/tensorboard_events_check.py --proto-python " +
                     AXONN_TENSORBOARD_PROTO_PYTHON_DIR + " --files " + std::to_string(files) + " " + run_dir.string());
}

std::vector<fs::path> events_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(entry.path());
  return files;
}

fs::path copy_run(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

TEST_F(TrainTensorBoard, EventsFilesHoldMetricsJsonlAndAResumedRunsFileContinuesTheCurves) {
  if (!python_reads_events())
    GTEST_SKIP() << "/usr/bin/python3 cannot import crc32c and google.protobuf: apt-get install python3-crc32c "
                    "python3-protobuf";
  write_file(dir_ / "job.toml", tiny_job(3, 3));
  const CommandResult first = run_train(dir_, 2, "2x1x1x1");
  ASSERT_EQ(first.code, 0) << first.output;
  const CommandResult checked_first = check_events(dir_ / "run", 1);
  EXPECT_EQ(checked_first.code, 0) << checked_first.output;
  EXPECT_TRUE(contains(checked_first.output, "ok: 1 events files, steps 1-3 (3)")) << checked_first.output;

  // The same job trained further: a new process resumes at step 3's checkpoint, appends steps
  // 4 and 5 to metrics.jsonl and writes them to an events file of its own.
  const CommandResult second = run_train(dir_, 2, "2x1x1x1", "training.steps=5");
  ASSERT_EQ(second.code, 0) << second.output;
  ASSERT_EQ(read_metrics(dir_ / "run").size(), 5u);
  const CommandResult checked = check_events(dir_ / "run", 2);
  EXPECT_EQ(checked.code, 0) << checked.output;
  EXPECT_TRUE(contains(checked.output, "ok: 2 events files, steps 1-5 (3 + 2)")) << checked.output;

  // A flipped byte in the last scalar of a file: the data's CRC no longer matches.
  const fs::path flipped = copy_run(dir_ / "run", dir_ / "flipped");
  const fs::path file = events_files(flipped).at(0);
  std::string bytes = read_text(file);
  const size_t last_data_byte = bytes.size() - 5;  // before the record's 4-byte data CRC
  bytes[last_data_byte] = static_cast<char>(bytes[last_data_byte] ^ 0x01);
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const CommandResult damaged = check_events(flipped, 2);
  EXPECT_EQ(damaged.code, 1) << damaged.output;
  EXPECT_TRUE(contains(damaged.output, file.string() + ": record ")) << damaged.output;
  EXPECT_TRUE(contains(damaged.output, "the data's CRC")) << damaged.output;

  // metrics.jsonl's loss at step 4 changed by far more than float32 rounding.
  const fs::path edited = copy_run(dir_ / "run", dir_ / "edited");
  std::string metrics = read_text(edited / "metrics.jsonl");
  const size_t step4 = metrics.find("{\"step\": 4, \"loss\": ");
  ASSERT_NE(step4, std::string::npos) << metrics;
  metrics.insert(step4 + std::string("{\"step\": 4, \"loss\": ").size(), "1");  // a 1 before it: 5.4 -> 15.4
  write_file(edited / "metrics.jsonl", metrics);
  const CommandResult differs = check_events(edited, 2);
  EXPECT_EQ(differs.code, 1) << differs.output;
  EXPECT_TRUE(contains(differs.output, "step 4, tag train/loss")) << differs.output;
}

}  // namespace
}  // namespace axonn::test
