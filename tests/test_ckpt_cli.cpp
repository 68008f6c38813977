// `axonn ckpt` as users run it, on a real checkpoint: a 4-rank `axonn run` of the test GPT
// (train_helpers.hpp: hidden 32, heads 8, global batch 24, so world 3 divides it) at layout
// 1x2x2x1, 4 steps with a checkpoint every 2 (steps 2 and 4 committed). It is trained once
// per build of axonn and each test works on its own copy:
// - inspect names the step, the layout that wrote it and every tensor; --json parses;
// - verify passes, then names the file, tensor and rows after one flipped byte, and a
//   missing shard; inspect names a damaged `latest`, and --fallback says loudly which step
//   it used instead;
// - plan --layout predicts, per new rank, exactly the bytes a resume at that layout reads
//   (counted by CheckpointReader::bytes_read() for the trainer's own requests), and refuses
//   a layout that does not divide the model (exit 2, naming the dimension) and a model config
//   it does not know;
// - export writes the full tensors that h5py reads from index.h5; --names mixtral (on
//   checkpoints written through the library) writes each MoE block's router and experts
//   under Mixtral's names, transposed, and every other tensor as it is.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/safetensors.hpp"
#include "checkpoint/safetensors_file.hpp"
#include "checkpoint/shard_writer.hpp"
#include "checkpoint/step_dir.hpp"
#include "layout/layout.hpp"
#include "train_helpers.hpp"
#include "trainer/model/parameters.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn::test {
namespace {

namespace fs = std::filesystem;

// tiny_job's [model]; the checkpoint's model_config must say the same.
ModelShape tiny_model() {
  ModelShape m;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 8;
  m.vocab = 256;
  m.sequence = 16;
  return m;
}

constexpr const char* kWrittenLayout = "1x2x2x1";
constexpr int kSteps = 4, kInterval = 2;

// ctest runs every TEST in its own process, so "train once" is a directory under the build
// tree, filled under a file lock (ctest -j runs tests side by side) and keyed by the axonn
// executable and the job, so a rebuilt trainer writes a fresh one.
fs::path trained_checkpoint() {
  const fs::path base = fs::path(AXONN_BINARY_DIR) / "test-ckpt-cli";
  fs::create_directories(base);
  const int lock = ::open((base / ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  EXPECT_GE(lock, 0) << "cannot open " << (base / ".lock");
  ::flock(lock, LOCK_EX);
  const auto binary_time = fs::last_write_time(kAxonn).time_since_epoch().count();
  const std::string stamp = std::to_string(fs::file_size(kAxonn)) + " " + std::to_string(binary_time) + "\n" +
                            kWrittenLayout + "\n" + tiny_job(kSteps, kInterval);
  const fs::path done = base / "trained";
  if (read_text(done / "stamp") != stamp) {
    fs::remove_all(done);
    const fs::path tmp = base / ("training-" + std::to_string(getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write_file(tmp / "job.toml", tiny_job(kSteps, kInterval));
    const CommandResult r = run_train(tmp, 4, kWrittenLayout);
    EXPECT_EQ(r.code, 0) << r.output;
    if (r.code == 0) {
      write_file(tmp / "stamp", stamp);
      fs::rename(tmp, done);
    }
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return done / "ckpt";
}

class CkptCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path trained = trained_checkpoint();
    ASSERT_TRUE(fs::exists(trained / "latest")) << "training the test checkpoint failed";
    dir_ = fresh_dir(std::string("ckpt-cli-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::copy(trained, ckpt(), fs::copy_options::recursive);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  fs::path ckpt() const { return dir_ / "ckpt"; }
  fs::path step_dir(int64_t step) const { return step_path(ckpt(), step); }
  // `axonn ckpt ARGS` run in the test's directory.
  CommandResult ckpt_cli(const std::string& args) const {
    return run_command("cd " + dir_.string() + " && " + kAxonn + " ckpt " + args);
  }

  fs::path dir_;
};

TEST_F(CkptCli, InspectShowsStepLayoutModelAndEveryTensor) {
  const CommandResult r = ckpt_cli("inspect ckpt");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const std::string line :
       {"checkpoint   ckpt/step-000000004", "step         4 (format AXONNCKP v3", "layout       1x2x2x1:xyzd (4 ranks)",
        "model        layers=2 hidden=32 heads=8 vocab=256 sequence=16", "data cursor  96",
        "int  training.global_batch = 24", "parameters   28 tensors", "AdamW moments beside them: 56 tensors",
        "shards       4 files"})
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
  // One row per parameter with its AdamW moments' rectangle counts beside it: wte [256, 32]
  // is split over y (rows) and x (columns), 4 rectangles; ln_f.weight over x only, 2.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n  wte +\[256, 32\] +32\.0 KiB +4 +4 +4\n)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n  ln_f\.weight +\[32\] +128 B +2 +2 +2\n)"))) << r.output;
  const CheckpointReader reader = CheckpointReader::open(ckpt());
  for (const TensorInfo& t : reader.tensors()) {
    const std::string param = t.name.substr(t.name.rfind('/') + 1);  // "adam.m/wte" is in wte's row
    EXPECT_TRUE(contains(r.output, "\n  " + param + " ")) << t.name << "\n" << r.output;
  }
  for (const ShardInfo& s : reader.shards())
    EXPECT_TRUE(contains(r.output, s.file + "  ")) << s.file << "\n" << r.output;

  // A step directory and --step name other steps.
  const CommandResult step2 = ckpt_cli("inspect ckpt/step-000000002");
  EXPECT_EQ(step2.code, 0) << step2.output;
  EXPECT_TRUE(contains(step2.output, "step         2 ")) << step2.output;
  EXPECT_TRUE(contains(ckpt_cli("inspect ckpt --step 2").output, "step         2 "));
}

TEST_F(CkptCli, InspectJsonParsesAndHoldsEveryTensorByFullName) {
  if (!python_has_h5py()) GTEST_SKIP() << "/usr/bin/python3 with json (Debian's python3) is not installed";
  write_file(dir_ / "fields.py",
             "import json, sys\n"
             "d = json.load(sys.stdin)\n"
             "print('step', d['step'], 'layout', d['layout'], 'world', d['world'], 'cursor', d['data_cursor'])\n"
             "print('batch', d['metadata']['ints']['training.global_batch'], 'model', d['model_config'])\n"
             "for t in d['tensors']:\n"
             "    print('tensor', t['name'], t['group'], 'x'.join(map(str, t['shape'])), t['rectangles'])\n"
             "for s in d['shards']:\n"
             "    print('shard', s['file'], s['rank'], s['data_bytes'], s['xxh3'])\n");
  const CommandResult r = ckpt_cli("inspect ckpt --json | /usr/bin/python3 fields.py");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "step 4 layout 1x2x2x1:xyzd world 4 cursor 96\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "batch 24 model " + model_config_text(tiny_model()) + "\n")) << r.output;
  const CheckpointReader reader = CheckpointReader::open(ckpt());
  ASSERT_EQ(reader.tensors().size(), 84u);  // 28 parameters and their two moments
  for (const TensorInfo& t : reader.tensors()) {
    const std::string group = t.name.rfind("adam.", 0) == 0 ? t.name.substr(0, 6) : "parameter";
    std::string shape;
    for (int64_t d : t.global_shape) {
      if (!shape.empty()) shape += 'x';
      shape += std::to_string(d);
    }
    const std::string line =
        "tensor " + t.name + " " + group + " " + shape + " " + std::to_string(t.sources.size()) + "\n";
    EXPECT_TRUE(contains(r.output, line)) << line << r.output;
  }
  for (const ShardInfo& s : reader.shards()) {
    char hash[32];
    std::snprintf(hash, sizeof hash, "0x%016llx", static_cast<unsigned long long>(s.checksum));
    const std::string line =
        "shard " + s.file + " " + std::to_string(s.rank) + " " + std::to_string(s.data_bytes) + " " + hash + "\n";
    EXPECT_TRUE(contains(r.output, line)) << line << r.output;
  }
}

TEST_F(CkptCli, VerifyPassesThenNamesTheFileTensorAndRowsOfAFlippedByte) {
  const CommandResult good = ckpt_cli("verify ckpt");
  EXPECT_EQ(good.code, 0) << good.output;
  EXPECT_TRUE(contains(good.output, "OK: step 4, 4 shards")) << good.output;

  const StoredRect source = CheckpointReader::open(ckpt()).tensor("wte").sources.at(1);
  flip_stored_byte(step_dir(4), "wte", source);
  const CommandResult bad = ckpt_cli("verify ckpt");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_TRUE(contains(bad.output, "FAILED: step 4")) << bad.output;
  EXPECT_TRUE(contains(
      bad.output, "ckpt/step-000000004/" + source.file + " [tensor 'wte']: checksum mismatch in " + source.dataset))
      << source.file << "\n"
      << bad.output;
  EXPECT_TRUE(contains(bad.output, "blocks differ from the index, rows 0..")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "axonn train --fallback")) << bad.output;

  // The other step is untouched; export of the damaged one refuses, naming the file.
  EXPECT_EQ(ckpt_cli("verify ckpt --step 2").code, 0);
  const CommandResult exported = ckpt_cli("export ckpt --to safetensors -o out.safetensors");
  EXPECT_EQ(exported.code, 1) << exported.output;
  EXPECT_TRUE(contains(exported.output, source.file)) << exported.output;
  EXPECT_FALSE(fs::exists(dir_ / "out.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "out.safetensors.partial"));
}

TEST_F(CkptCli, AMissingShardIsNamedAndFallbackSaysWhichStepItUsed) {
  fs::remove(step_dir(4) / "shard-00002.h5");
  const CommandResult inspect = ckpt_cli("inspect ckpt");
  EXPECT_EQ(inspect.code, 1) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "axonn ckpt inspect: shard file ckpt/step-000000004/shard-00002.h5 (rank 2)"))
      << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "is missing")) << inspect.output;

  const CommandResult verify = ckpt_cli("verify ckpt");
  EXPECT_EQ(verify.code, 1) << verify.output;
  EXPECT_TRUE(contains(verify.output, "ckpt/step-000000004/shard-00002.h5: shard file is missing")) << verify.output;
  EXPECT_TRUE(contains(verify.output, "3 shards")) << verify.output;

  const CommandResult fallback = ckpt_cli("inspect ckpt --fallback");
  EXPECT_EQ(fallback.code, 0) << fallback.output;
  EXPECT_TRUE(contains(fallback.output,
                       "WARNING: --fallback: using ckpt/step-000000002, NOT the step asked for (step-000000004)"))
      << fallback.output;
  EXPECT_TRUE(contains(fallback.output, "step-000000004: shard file")) << fallback.output;
  EXPECT_TRUE(contains(fallback.output, "step         2 ")) << fallback.output;
  const CommandResult plan = ckpt_cli("plan ckpt --layout 2x1x1x1 --fallback");
  EXPECT_EQ(plan.code, 0) << plan.output;
  EXPECT_TRUE(contains(plan.output, "NOT the step asked for")) << plan.output;
  EXPECT_TRUE(contains(plan.output, "(step 2)")) << plan.output;
}

TEST_F(CkptCli, ADamagedLatestOrUnknownFormatIsNamed) {
  write_file(ckpt() / "latest", "step-000000006\n");
  for (const char* sub : {"inspect ckpt", "verify ckpt", "plan ckpt --layout 1x1x1x1"}) {
    const CommandResult r = ckpt_cli(sub);
    EXPECT_EQ(r.code, 1) << sub << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "ckpt/latest names step-000000006, which does not exist")) << sub << "\n"
                                                                                              << r.output;
  }
  write_file(ckpt() / "latest", "step-000000004\n");

  fs::create_directories(dir_ / "empty");
  const CommandResult nothing = ckpt_cli("inspect empty");
  EXPECT_EQ(nothing.code, 2) << nothing.output;
  EXPECT_TRUE(contains(nothing.output, "empty holds no `latest` and no index.h5")) << nothing.output;
  const CommandResult absent = ckpt_cli("inspect ckpt --step 3");
  EXPECT_EQ(absent.code, 2) << absent.output;
  EXPECT_TRUE(contains(absent.output, "step 3 is not committed in ckpt (committed steps: 2, 4)")) << absent.output;

  if (!python_has_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py: apt-get install python3-h5py";
  write_file(dir_ / "bump_version.py",
             "import sys, h5py, numpy\n"
             "with h5py.File(sys.argv[1], 'r+') as f:\n"
             "    f.attrs['format_version'] = numpy.int64(7)\n");
  const CommandResult bump = run_command("/usr/bin/python3 " + (dir_ / "bump_version.py").string() + " " +
                                         (step_dir(4) / "index.h5").string());
  ASSERT_EQ(bump.code, 0) << bump.output;
  for (const char* sub :
       {"inspect ckpt", "verify ckpt", "plan ckpt --layout 1x1x1x1", "export ckpt --to safetensors"}) {
    const CommandResult r = ckpt_cli(sub);
    EXPECT_EQ(r.code, 1) << sub << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "index.h5")) << sub << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "has checkpoint format version 7; this build reads versions 1, 2 and 3 only"))
        << sub << "\n"
        << r.output;
  }
}

// One line of plan's table: rank, file count, exact bytes read and wanted, the files.
struct PlanRow {
  int64_t bytes_read = 0, bytes_wanted = 0;
  std::set<std::string> files;
};

// The rows of the unsharded table (sharded = false) or of the sharded optimizer's.
std::vector<PlanRow> plan_rows(const std::string& full_output, bool sharded = false) {
  const size_t split = full_output.find("\noptimizer sharded");
  const std::string output =
      sharded ? (split == std::string::npos ? "" : full_output.substr(split)) : full_output.substr(0, split);
  std::vector<PlanRow> rows;
  const std::regex row(R"(\n +(\d+) +(\d+) +[0-9.]+ [KMG]?i?B \((\d+) B\) +[0-9.]+ [KMG]?i?B \((\d+) B\) +([^\n]*))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    EXPECT_EQ(std::stoul(m[1]), rows.size()) << output;
    PlanRow r{std::stoll(m[3]), std::stoll(m[4]), {}};
    std::stringstream files(m[5]);
    for (std::string f; std::getline(files, f, ',');) r.files.insert(f.substr(f.find_first_not_of(' ')));
    EXPECT_EQ(std::stoul(m[2]), r.files.size()) << output;
    rows.push_back(r);
  }
  return rows;
}

class CkptCliPlan : public CkptCli, public ::testing::WithParamInterface<std::string> {};

// What plan prints for each new rank equals what that rank reads when it resumes: the
// trainer's requests (every parameter and both moments at its own rectangles, built here
// from parameter_layout as TrainingCheckpoint::load builds them) read through one
// CheckpointReader per rank, as load_checkpoint does, counted by bytes_read().
TEST_P(CkptCliPlan, PredictsTheBytesAndFilesEveryNewRankReads) {
  const Layout layout = parse_layout(GetParam());
  const CommandResult r = ckpt_cli("plan ckpt --layout " + GetParam());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "layout      " + format_layout_with_order(layout) + " (")) << r.output;
  EXPECT_TRUE(contains(r.output, "valid, it divides the model and the batch")) << r.output;
  EXPECT_TRUE(contains(r.output, "model       " + model_config_text(tiny_model()))) << r.output;
  EXPECT_TRUE(contains(r.output, "global_batch=24 (the checkpoint's meta.int.training.global_batch)")) << r.output;
  const std::vector<PlanRow> rows = plan_rows(r.output);
  ASSERT_EQ(rows.size(), static_cast<size_t>(layout.world())) << r.output;

  // The sharded optimizer's table where G_data > 1: each data rank reads its pieces of the
  // moments (state_slices, as TrainingCheckpoint::load requests them).
  const std::vector<PlanRow> sharded_rows = plan_rows(r.output, true);
  if (layout.data > 1) {
    ASSERT_EQ(sharded_rows.size(), static_cast<size_t>(layout.world())) << r.output;
  } else {
    EXPECT_TRUE(contains(r.output, "optimizer sharded: G_data = 1 at this layout, nothing to shard")) << r.output;
  }

  int64_t total_read = 0, sharded_moments = 0, moments = 0;
  for (int rank = 0; rank < layout.world(); ++rank) {
    for (bool shard : {false, true}) {
      if (shard && layout.data == 1) continue;
      CheckpointReader reader = CheckpointReader::open(ckpt());
      const Coords at = layout.coords(rank);
      const ParameterLayout params = parameter_layout(tiny_model(), layout, at, shard);
      std::set<std::string> files;
      int64_t wanted = 0;
      for (const StateSlice& slice : state_slices(params, optimizer_state_runs(params, at.data))) {
        std::vector<float> dst(static_cast<size_t>(element_count(slice.rect)));
        reader.read(SliceRead{slice.name, slice.slot->spec.shape, slice.rect, dst.data()});
        wanted += element_count(slice.rect) * 4;
        if (slice.buffer != StateBuffer::params) (shard ? sharded_moments : moments) += element_count(slice.rect) * 4;
        for (const StoredRect& s : reader.tensor(slice.name).sources)
          if (intersect(s.rect, slice.rect)) files.insert(s.file);
      }
      const PlanRow& row = (shard ? sharded_rows : rows)[static_cast<size_t>(rank)];
      const std::string what = std::string(shard ? "sharded " : "") + "rank " + std::to_string(rank);
      EXPECT_EQ(row.bytes_read, reader.bytes_read()) << what << "\n" << r.output;
      EXPECT_EQ(row.bytes_wanted, wanted) << what;
      EXPECT_EQ(row.files, files) << what << "\n" << r.output;
      if (!shard) total_read += reader.bytes_read();
    }
  }
  // Sharded, the data ranks want the moments once between them, not once each.
  if (layout.data > 1) {
    EXPECT_EQ(sharded_moments * layout.data, moments);
  }
  EXPECT_TRUE(std::regex_search(r.output,
                                std::regex("\ntotal       reads [^(]+\\(" + std::to_string(total_read) + " B\\) for ")))
      << total_read << "\n"
      << r.output;
  // The same-layout load is the reference: a load at the layout that wrote the checkpoint
  // reads exactly its payload once per copy, with no read amplification.
  EXPECT_TRUE(contains(r.output, "vs written  a load at 1x2x2x1:xyzd (4 ranks) reads")) << r.output;
  if (format_layout(layout) == kWrittenLayout) {
    EXPECT_TRUE(contains(r.output, "this layout reads 1.00x that")) << r.output;
  }
}

// The same layout, the serial one, world 3 (data parallel only) and 8 ranks in another axis
// order whose column split differs from the written one (whole checksum-block rows are read).
INSTANTIATE_TEST_SUITE_P(Layouts, CkptCliPlan, ::testing::Values("1x2x2x1", "1x1x1x1", "3x1x1x1", "2x2x1x2:zyxd"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             if (c == ':') c = '_';
                           return name;
                         });

TEST_F(CkptCli, PlanRefusesALayoutThatDoesNotDivideTheModelOrBatch) {
  const CommandResult hidden = ckpt_cli("plan ckpt --layout 1x3x1x1");
  EXPECT_EQ(hidden.code, 2) << hidden.output;
  EXPECT_TRUE(contains(hidden.output,
                       "layout 1x3x1x1:xyzd cannot resume ckpt/step-000000004: hidden=32 is not "
                       "divisible by G_x*G_z=3"))
      << hidden.output;
  const CommandResult heads = ckpt_cli("plan ckpt --layout 1x1x16x1");
  EXPECT_EQ(heads.code, 2) << heads.output;
  EXPECT_TRUE(contains(heads.output, "is not divisible by G_y")) << heads.output;
  const CommandResult batch = ckpt_cli("plan ckpt --layout 5x1x1x1");
  EXPECT_EQ(batch.code, 2) << batch.output;
  EXPECT_TRUE(contains(batch.output, "global_batch=24 is not divisible by G_data*G_z=5")) << batch.output;
  EXPECT_TRUE(contains(batch.output, "meta.int.training.global_batch")) << batch.output;
  // A job with another global batch: the user's number is checked instead, and says so.
  const CommandResult own_batch = ckpt_cli("plan ckpt --layout 5x1x1x1 --global-batch 10");
  EXPECT_EQ(own_batch.code, 0) << own_batch.output;
  EXPECT_TRUE(contains(own_batch.output, "global_batch=10 (--global-batch)")) << own_batch.output;
  const CommandResult json = ckpt_cli("plan ckpt --layout 1x3x1x1 --json");
  EXPECT_EQ(json.code, 2) << json.output;
  EXPECT_TRUE(contains(json.output, "\"valid\" : false")) << json.output;
  // The checkpoint's model is dense: expert parallelism is the layout's to drop.
  const CommandResult experts = ckpt_cli("plan ckpt --layout 2x1x1x1e2");
  EXPECT_EQ(experts.code, 2) << experts.output;
  EXPECT_TRUE(contains(experts.output,
                       "layout 2x1x1x1e2:xyzd cannot resume ckpt/step-000000004: e2 asks for expert parallelism 2 but "
                       "the checkpoint's model is dense; drop 'e2'"))
      << experts.output;
  const CommandResult experts_json = ckpt_cli("plan ckpt --layout 2x1x1x1e2:yxzd --json");
  EXPECT_EQ(experts_json.code, 2) << experts_json.output;
  EXPECT_TRUE(contains(experts_json.output, "\"layout\" : \"2x1x1x1e2:yxzd\"")) << experts_json.output;
  EXPECT_TRUE(contains(experts_json.output, "\"valid\" : false")) << experts_json.output;

  for (const char* bad : {"--layout 2x2", "--layout 0x1x1x1", "", "--layout 1x1x1x1 extra"}) {
    const CommandResult r = ckpt_cli(std::string("plan ckpt ") + bad);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "axonn ckpt plan: ")) << r.output;
  }
}

// A copy of the trained step 4 with its tensors limited to `keep` and another model_config,
// committed as step 4 of `dir` by the checkpoint library (as a foreign writer would).
void write_variant(const fs::path& from, const fs::path& dir, const std::string& model_config,
                   bool (*keep)(const std::string&)) {
  CheckpointReader reader = CheckpointReader::open(from);
  std::vector<std::vector<float>> data;
  std::vector<TensorSlice> slices;
  for (const TensorInfo& t : reader.tensors()) {
    if (!keep(t.name)) continue;
    data.emplace_back(static_cast<size_t>(element_count(t.global_shape)));
    reader.read(t.name, full_rect(t.global_shape), data.back().data());
    slices.push_back({t.name, t.global_shape, full_rect(t.global_shape), data.back().data()});
  }
  write_shard(dir, 4, 0, slices);
  Metadata metadata = reader.metadata();
  metadata.model_config = model_config;
  const int ranks[] = {0};
  commit(dir, 4, ranks, metadata, 1, std::chrono::seconds(10));
}

TEST_F(CkptCli, PlanRefusesAModelConfigOrTensorsItDoesNotKnow) {
  const std::string good = model_config_text(tiny_model());
  const struct {
    std::string config;
    std::string message;
  } cases[] = {
      {good + " shared_experts=1", "unknown key 'shared_experts'; this axonn knows layers, hidden, heads, vocab, sequence"},
      {good + " experts=4", "key 'top_k' is missing"},  // an MoE model's keys come together
      {"layers=2 hidden=32 heads=8 vocab=256", "key 'sequence' is missing"},
      {"layers=2 hidden=32 heads=8 vocab=256 sequence=16 layers=2", "key 'layers' appears twice"},
      {"layers=2 hidden=-32 heads=8 vocab=256 sequence=16", "hidden = '-32' is not a positive integer"},
      {"layers=2 hidden=032 heads=8 vocab=256 sequence=16", "not in the trainer's form '" + good + "'"},
      {"layers=2  hidden=32 heads=8 vocab=256 sequence=16", "token '' is not key=value"},
  };
  auto everything = [](const std::string&) { return true; };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const fs::path dir = dir_ / ("variant-" + std::to_string(i));
    write_variant(ckpt(), dir, cases[i].config, everything);
    const CommandResult r = ckpt_cli("plan " + dir.filename().string() + " --layout 1x1x1x1");
    EXPECT_EQ(r.code, 1) << cases[i].config << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "index.h5: model_config '" + cases[i].config + "'")) << r.output;
    EXPECT_TRUE(contains(r.output, cases[i].message)) << cases[i].config << "\n" << r.output;
  }
  // The model it names, but without the AdamW moments the trainer reads back.
  write_variant(ckpt(), dir_ / "params-only", good,
                [](const std::string& name) { return name.rfind("adam.", 0) != 0; });
  const CommandResult r = ckpt_cli("plan params-only --layout 1x1x1x1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "adam.m/")) << r.output;
  EXPECT_TRUE(contains(r.output, "index.h5")) << r.output;
  // inspect has nothing to refuse there: it shows the parameters without moments.
  const CommandResult inspect = ckpt_cli("inspect params-only");
  EXPECT_EQ(inspect.code, 0) << inspect.output;
  EXPECT_TRUE(std::regex_search(inspect.output, std::regex(R"(\n  wte +\[256, 32\] +32\.0 KiB +1 +- +-\n)")))
      << inspect.output;
}

TEST_F(CkptCli, ExportHoldsTheTensorsH5pyReadsFromTheIndex) {
  const CommandResult all = ckpt_cli("export ckpt --to safetensors");
  ASSERT_EQ(all.code, 0) << all.output;
  // The default name is the step directory's, in the current directory.
  EXPECT_TRUE(contains(all.output, "wrote step-000000004.safetensors: 84 tensors")) << all.output;
  ASSERT_TRUE(fs::exists(dir_ / "step-000000004.safetensors"));
  const CommandResult params = ckpt_cli("export ckpt --step 2 --to=safetensors --only params -o p.safetensors");
  ASSERT_EQ(params.code, 0) << params.output;
  EXPECT_TRUE(contains(params.output, "wrote p.safetensors: 28 tensors")) << params.output;
  EXPECT_EQ(ckpt_cli("export ckpt --to onnx").code, 2);
  EXPECT_EQ(ckpt_cli("export ckpt --to safetensors --only moments").code, 2);
  EXPECT_EQ(ckpt_cli("export ckpt").code, 2);

  // The library refuses an unknown tensor before writing anything.
  CheckpointReader reader = CheckpointReader::open(ckpt());
  EXPECT_THROW(export_safetensors(reader, dir_ / "x.safetensors", {}, {"wte", "nope"}), RequestMismatch);
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));

  if (!python_has_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py and numpy: apt-get install python3-h5py";
  const std::string check = "/usr/bin/python3 " + kSourceDir + "/tests/ckpt_export_h5py_check.py ";
  const CommandResult h5 =
      run_command(check + step_dir(4).string() + " " + (dir_ / "step-000000004.safetensors").string());
  EXPECT_EQ(h5.code, 0) << h5.output;
  EXPECT_TRUE(contains(h5.output, "ok: 84 tensors")) << h5.output;
  const CommandResult h5_params =
      run_command(check + step_dir(2).string() + " " + (dir_ / "p.safetensors").string() + " --params-only");
  EXPECT_EQ(h5_params.code, 0) << h5_params.output;
  EXPECT_TRUE(contains(h5_params.output, "ok: 28 tensors")) << h5_params.output;
  // The checker can fail: step 4's index against step 2's export.
  EXPECT_EQ(run_command(check + step_dir(4).string() + " " + (dir_ / "p.safetensors").string() + " --params-only").code,
            1);
}

// `axonn ckpt export --names`, on checkpoints of an MoE GPT (and a dense one) written through
// the checkpoint library, no training: every parameter and both AdamW moments, each tensor's
// rows split over 2 writing ranks, with exact values that say which tensor and element.
class CkptExportNames : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fresh_dir(std::string("ckpt-export-names-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // C = 8, E = 3 experts in block 1 (moe_every 2), block 0 dense.
  static ModelShape model(int experts) {
    ModelShape m;
    m.layers = 2;
    m.hidden = 8;
    m.heads = 2;
    m.vocab = 16;
    m.sequence = 4;
    m.experts = experts;
    m.moe_every = 2;
    return m;
  }

  void write_checkpoint(const ModelShape& m) {
    std::vector<std::string> names;
    for (const ParamSpec& spec : gpt_parameters(m)) {
      for (const std::string prefix : {"", "adam.m/", "adam.v/"}) {
        std::string name = prefix;
        name.append(spec.name);
        shapes_[name] = spec.shape;
        std::vector<float>& v = values_[name];
        v.resize(static_cast<size_t>(element_count(spec.shape)));
        const auto k = static_cast<float>(names.size());
        for (size_t i = 0; i < v.size(); ++i) v[i] = k * 1024.0f + static_cast<float>(i % 1021) * 0.5f;
        names.push_back(name);
      }
    }
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<std::vector<float>> data;
      std::vector<TensorSlice> slices;
      data.reserve(names.size());
      for (const std::string& name : names) {
        const std::vector<int64_t>& shape = shapes_[name];
        Rect half = full_rect(shape);
        half.count[0] = rank == 0 ? shape[0] / 2 : shape[0] - shape[0] / 2;
        half.offset[0] = rank == 0 ? 0 : shape[0] / 2;
        data.emplace_back(static_cast<size_t>(element_count(half)));
        const int64_t row = element_count(shape) / shape[0];
        const float* from = values_[name].data() + half.offset[0] * row;
        std::copy(from, from + element_count(half), data.back().begin());
        slices.push_back({name, shape, half, data.back().data()});
      }
      write_shard(ckpt(), 6, rank, slices);
    }
    Metadata metadata;
    metadata.layout = "2x1x1x1";
    metadata.model_config = model_config_text(m);
    const int ranks[] = {0, 1};
    commit(ckpt(), 6, ranks, metadata, 1, std::chrono::seconds(10));
  }

  fs::path ckpt() const { return dir_ / "ckpt"; }
  CommandResult ckpt_cli(const std::string& args) const {
    return run_command("cd " + dir_.string() + " && " + kAxonn + " ckpt " + args);
  }

  // Element [i][j] of the row-major matrix with `cols` columns that starts `offset` elements
  // into checkpoint tensor `name` (one expert's slab of an [E, k, n] tensor: offset e·k·n).
  float at(const std::string& name, int64_t offset, int64_t cols, int64_t i, int64_t j) {
    return values_[name][static_cast<size_t>(offset + i * cols + j)];
  }

  fs::path dir_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, std::vector<float>> values_;
};

// A safetensors file read back through the reader the import uses (SafetensorsFile, which
// checks that data_offsets tile the data exactly): every tensor whole, in float32.
struct FileTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
std::map<std::string, FileTensor> read_safetensors(const fs::path& path) {
  const SafetensorsFile file(path);
  std::map<std::string, FileTensor> out;
  for (const auto& t : file.tensors()) {
    EXPECT_EQ(t.dtype, SafetensorsType::f32) << t.name;
    FileTensor& f = out[t.name];
    f.shape = t.shape;
    f.data.resize(static_cast<size_t>(t.elements()));
    file.read_floats(t, 0, t.elements(), f.data.data());
  }
  return out;
}

// SwiGLU experts (Mixtral's own shape): fc [E, C, 2, F] is w1 (the gate half) and w3 (the up
// half), each [F, C]; no biases.
TEST_F(CkptExportNames, SwigluExpertsAreMixtralsW1W3AndW2) {
  ModelShape m = model(2);
  m.mlp = Mlp::swiglu;
  m.mlp_hidden = 12;
  m.bias = false;
  write_checkpoint(m);
  const CommandResult r = ckpt_cli("export ckpt --to safetensors --names mixtral --only params -o mix.safetensors");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto file = read_safetensors(dir_ / "mix.safetensors");
  const int64_t C = 8, F = 12, E = 2;
  for (int64_t e = 0; e < E; ++e) {
    const std::string expert = "model.layers.1.block_sparse_moe.experts." + std::to_string(e) + ".";
    ASSERT_TRUE(file.count(expert + "w1.weight") && file.count(expert + "w3.weight") && file.count(expert + "w2.weight"))
        << r.output;
    const FileTensor& w1 = file.at(expert + "w1.weight");
    const FileTensor& w3 = file.at(expert + "w3.weight");
    const FileTensor& w2 = file.at(expert + "w2.weight");
    EXPECT_EQ(w1.shape, (std::vector<int64_t>{F, C}));
    EXPECT_EQ(w3.shape, (std::vector<int64_t>{F, C}));
    EXPECT_EQ(w2.shape, (std::vector<int64_t>{C, F}));
    for (int64_t o = 0; o < F; ++o)
      for (int64_t i = 0; i < C; ++i) {
        // fc.weight[e] [C, 2, F] as a [C, 2F] matrix: the gate at column o, the up at F + o.
        EXPECT_EQ(w1.data[static_cast<size_t>(o * C + i)], at("h.1.mlp.experts.fc.weight", e * C * 2 * F, 2 * F, i, o));
        EXPECT_EQ(w3.data[static_cast<size_t>(o * C + i)],
                  at("h.1.mlp.experts.fc.weight", e * C * 2 * F, 2 * F, i, F + o));
        EXPECT_EQ(w2.data[static_cast<size_t>(i * F + o)], at("h.1.mlp.experts.proj.weight", e * F * C, C, o, i));
      }
    EXPECT_FALSE(file.count(expert + "w1.bias")) << "no biases";
  }
}

TEST_F(CkptExportNames, MixtralNamesHoldEachExpertTransposedAndTheRestUnchanged) {
  write_checkpoint(model(3));
  const CommandResult r = ckpt_cli("export ckpt --to safetensors --names mixtral -o mix.safetensors");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto file = read_safetensors(dir_ / "mix.safetensors");
  const int64_t C = 8, H = 4 * C, E = 3;
  const std::string moe = "model.layers.1.block_sparse_moe.";
  // 4 MoE tensors become 4·E, the router stays one: 3·(parameters) - 5 + 1 + 4·E.
  const size_t parameters = gpt_parameters(model(3)).size();
  EXPECT_EQ(file.size(), 3 * parameters - 5 + 1 + static_cast<size_t>(4 * E));
  EXPECT_TRUE(contains(r.output, "mix.safetensors: " + std::to_string(file.size()) + " tensors")) << r.output;
  EXPECT_TRUE(contains(r.output, "--names mixtral: the routers and experts of 1 MoE block under")) << r.output;

  // gate.weight [E, C] = router [C, E] transposed.
  ASSERT_TRUE(file.count(moe + "gate.weight")) << r.output;
  const FileTensor& gate = file.at(moe + "gate.weight");
  EXPECT_EQ(gate.shape, (std::vector<int64_t>{E, C}));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(gate.data[static_cast<size_t>(e * C + c)], at("h.1.mlp.router.weight", 0, E, c, e)) << e << " " << c;

  for (int64_t e = 0; e < E; ++e) {
    const std::string expert = moe + "experts." + std::to_string(e) + ".";
    ASSERT_TRUE(file.count(expert + "w1.weight") && file.count(expert + "w2.weight")) << expert;
    // w1.weight [4C, C] = fc.weight[e] [C, 4C] transposed; w2.weight [C, 4C] = proj.weight[e] [4C, C] transposed.
    const FileTensor& w1 = file.at(expert + "w1.weight");
    const FileTensor& w2 = file.at(expert + "w2.weight");
    EXPECT_EQ(w1.shape, (std::vector<int64_t>{H, C}));
    EXPECT_EQ(w2.shape, (std::vector<int64_t>{C, H}));
    for (int64_t o = 0; o < H; ++o)
      for (int64_t i = 0; i < C; ++i) {
        EXPECT_EQ(w1.data[static_cast<size_t>(o * C + i)], at("h.1.mlp.experts.fc.weight", e * C * H, H, i, o));
        EXPECT_EQ(w2.data[static_cast<size_t>(i * H + o)], at("h.1.mlp.experts.proj.weight", e * H * C, C, o, i));
      }
    // The biases are expert e's row, as they are.
    const FileTensor& b1 = file.at(expert + "w1.bias");
    const FileTensor& b2 = file.at(expert + "w2.bias");
    EXPECT_EQ(b1.shape, (std::vector<int64_t>{H}));
    EXPECT_EQ(b2.shape, (std::vector<int64_t>{C}));
    const std::vector<float>& fc_bias = values_["h.1.mlp.experts.fc.bias"];
    const std::vector<float>& proj_bias = values_["h.1.mlp.experts.proj.bias"];
    EXPECT_EQ(b1.data, std::vector<float>(fc_bias.begin() + e * H, fc_bias.begin() + (e + 1) * H)) << expert;
    EXPECT_EQ(b2.data, std::vector<float>(proj_bias.begin() + e * C, proj_bias.begin() + (e + 1) * C)) << expert;
    EXPECT_FALSE(file.count(expert + "w3.weight")) << "axonn's experts are GELU MLPs";
  }

  // Every other tensor, the AdamW moments of the MoE ones included, under its axonn name, whole.
  for (const auto& [name, values] : values_) {
    const bool renamed = name.rfind("h.1.mlp.", 0) == 0;
    EXPECT_EQ(file.count(name), renamed ? 0u : 1u) << name;
    if (renamed || !file.count(name)) continue;
    EXPECT_EQ(file.at(name).shape, shapes_[name]) << name;
    EXPECT_EQ(file.at(name).data, values) << name;
  }

  // --only params leaves the moments out and renames the same tensors.
  const CommandResult params = ckpt_cli("export ckpt --to safetensors --names mixtral --only params -o p.safetensors");
  ASSERT_EQ(params.code, 0) << params.output;
  const auto params_file = read_safetensors(dir_ / "p.safetensors");
  EXPECT_EQ(params_file.size(), parameters - 5 + 1 + static_cast<size_t>(4 * E));
  for (const auto& [name, t] : params_file) EXPECT_EQ(name.rfind("adam.", 0), std::string::npos) << name;
  EXPECT_TRUE(params_file.count(moe + "experts.2.w2.bias"));
}

TEST_F(CkptExportNames, DefaultAndAxonnNamesWriteEveryTensorWholeInTheSameFile) {
  write_checkpoint(model(3));
  const CommandResult plain = ckpt_cli("export ckpt --to safetensors -o plain.safetensors");
  ASSERT_EQ(plain.code, 0) << plain.output;
  EXPECT_FALSE(contains(plain.output, "--names")) << plain.output;
  const CommandResult axonn = ckpt_cli("export ckpt --to safetensors --names axonn -o axonn.safetensors");
  ASSERT_EQ(axonn.code, 0) << axonn.output;
  EXPECT_EQ(read_text(dir_ / "plain.safetensors"), read_text(dir_ / "axonn.safetensors"));
  // The library's own export of every tensor is the same file too.
  CheckpointReader reader = CheckpointReader::open(ckpt());
  export_safetensors(reader, dir_ / "library.safetensors");
  EXPECT_EQ(read_text(dir_ / "plain.safetensors"), read_text(dir_ / "library.safetensors"));
  const auto file = read_safetensors(dir_ / "plain.safetensors");
  EXPECT_EQ(file.size(), values_.size());
  for (const auto& [name, values] : values_) {
    ASSERT_TRUE(file.count(name)) << name;
    EXPECT_EQ(file.at(name).shape, shapes_[name]) << name;
    EXPECT_EQ(file.at(name).data, values) << name;
  }
}

TEST_F(CkptExportNames, MixtralNamesOnADenseModelWriteItUnchangedAndSaySo) {
  write_checkpoint(model(0));
  const CommandResult plain = ckpt_cli("export ckpt --to safetensors -o plain.safetensors");
  ASSERT_EQ(plain.code, 0) << plain.output;
  const CommandResult mix = ckpt_cli("export ckpt --to safetensors --names mixtral -o mix.safetensors");
  ASSERT_EQ(mix.code, 0) << mix.output;
  EXPECT_TRUE(contains(mix.output, "--names mixtral: no MoE tensors to rename (a dense model)")) << mix.output;
  EXPECT_EQ(read_text(dir_ / "plain.safetensors"), read_text(dir_ / "mix.safetensors"));
}

TEST_F(CkptExportNames, AnUnknownNamesValueIsABadInputNamingTheChoices) {
  write_checkpoint(model(3));
  const CommandResult r = ckpt_cli("export ckpt --to safetensors --names llama -o x.safetensors");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "unknown --names llama; use --names axonn")) << r.output;
  EXPECT_TRUE(contains(r.output, "--names mixtral")) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
  const CommandResult help = ckpt_cli("export --help");
  EXPECT_EQ(help.code, 0) << help.output;
  EXPECT_TRUE(contains(help.output, "mixtral")) << help.output;
}

}  // namespace
}  // namespace axonn::test
