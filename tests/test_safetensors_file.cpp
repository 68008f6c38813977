// checkpoint/safetensors_file: safetensors files as Hugging Face writes them, read back
// tensor by tensor in float32; a header that lies is refused naming the file, the tensor and
// the field, before any data is read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/safetensors_dir.hpp"
#include "checkpoint/safetensors_file.hpp"
#include "train_helpers.hpp"

namespace axonn {
namespace {

class SafetensorsRead : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  // A file of `header` (JSON, padded with spaces to a multiple of 8 as the writers do) and
  // `data`.
  std::filesystem::path write_file(const std::string& name, std::string header, const std::string& data) const;
  const std::filesystem::path dir_ = test::fresh_dir("safetensors");
};

std::filesystem::path SafetensorsRead::write_file(const std::string& name, std::string header,
                                                  const std::string& data) const {
  const auto path = dir_ / name;
  while (header.size() % 8 != 0) header += ' ';
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << header << data;
  return path;
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

TEST_F(SafetensorsRead, ReadsEachDtypeAsFloat32InRanges) {
  // F32 [2, 3], BF16 [2] (1.5, -2), F16 [3] (1.0, a subnormal, -inf), F64 [1] (0.1).
  const std::string f32 = bytes_of(std::vector<float>{1, 2, 3, 4, 5, 6});
  const std::string bf16 = bytes_of(std::vector<uint16_t>{0x3FC0, 0xC000});
  const std::string f16 = bytes_of(std::vector<uint16_t>{0x3C00, 0x0001, 0xFC00});
  const std::string f64 = bytes_of(std::vector<double>{0.1});
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},)"
      R"( "h": {"dtype": "F16", "shape": [3], "data_offsets": [28, 34]},)"
      R"( "d": {"dtype": "F64", "shape": [1], "data_offsets": [34, 42]}})";
  const SafetensorsFile file(write_file("ok.safetensors", header, f32 + bf16 + f16 + f64));
  ASSERT_EQ(file.tensors().size(), 4u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  const SafetensorsTensor* w = file.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> out(6);
  file.read_floats(*w, 0, 6, out.data());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  file.read_floats(*w, 4, 2, out.data());  // the second row's last two
  EXPECT_EQ(out[0], 5.0f);
  EXPECT_EQ(out[1], 6.0f);
  file.read_floats(*file.find("b"), 0, 2, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  file.read_floats(*file.find("h"), 0, 3, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], std::ldexp(1.0f, -24));  // the smallest F16 subnormal
  EXPECT_TRUE(std::isinf(out[2]) && out[2] < 0);
  file.read_floats(*file.find("d"), 0, 1, out.data());
  EXPECT_EQ(out[0], 0.1f);
  EXPECT_EQ(file.find("absent"), nullptr);
  EXPECT_THROW(file.read_floats(*w, 5, 2, out.data()), SafetensorsError);  // past its end
}

TEST_F(SafetensorsRead, AHeaderThatLiesIsRefusedNamingTheTensorAndTheField) {
  const std::string data8(8, '\0');
  struct Case {
    std::string header, data, says;
  };
  const std::vector<Case> cases = {
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1],)"
       R"( "data_offsets": [4, 8]}})",
       data8, "tensor \"b\" data_offsets begin at 4, inside the tensor before it (which ends at 8)"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", data8,
       "tensor \"a\" data_offsets begin at 4, leaving bytes 0 to 4 of the data to no tensor"},
      {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", data8,
       "the tensors end at byte 16 of the data, but the file holds 8 data bytes after the header"},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", data8,
       "tensor \"a\" data_offsets [0, 8] hold 8 bytes, but its shape and dtype F32 need 12"},
      {R"({"a": {"dtype": "F13", "shape": [2], "data_offsets": [0, 8]}})", data8,
       "tensor \"a\": unknown dtype \"F13\" (known: F64, F32,"},
      {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", data8,
       "tensor \"a\" shape has a negative extent -2"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", data8,
       "tensor \"a\" data_offsets [8, 0] is not a range"},
      {R"({"a": {"dtype": "F32", "shape": [2]}})", data8, "tensor \"a\": no key \"data_offsets\""},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "stride": 1}})", data8,
       "tensor \"a\" has an unknown field \"stride\""},
      {R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", data8,
       "tensor \"a\": expected an integer, got 2.5"},
      {R"({"__metadata__": {"step": 3}})", "", "__metadata__ \"step\" is a number, not a string"},
      {R"([1, 2])", "", "header is an array, not an object"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {}})", data8,
       "the key \"a\" appears twice in one object"},
      {R"({"a": )", data8, "header: malformed JSON at byte 8 (line 1, column 9): expected a value"},
  };
  for (const Case& c : cases) {
    const auto path = write_file("bad.safetensors", c.header, c.data);
    try {
      SafetensorsFile file(path);
      ADD_FAILURE() << c.header << " was accepted";
    } catch (const SafetensorsError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path.string() + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(c.says), std::string::npos) << c.header << "\n" << what;
      EXPECT_EQ(e.exit_code(), exit_code::bad_input);
    }
  }
}

TEST_F(SafetensorsRead, ALengthThatDoesNotFitTheFileIsNotASafetensorsFile) {
  const auto& dir = dir_;
  const auto expect_refused = [&](const std::string& bytes, const std::string& says) {
    const auto path = dir / "f.safetensors";
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      SafetensorsFile file(path);
      ADD_FAILURE() << says;
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_refused("abc", "shorter than the 8-byte header length (3 bytes)");
  expect_refused(std::string("\x10\0\0\0\0\0\0\0{}", 10), "header length 16 runs past the end of the file (10 bytes)");
  expect_refused(std::string("\0\0\0\0\0\0\0\x01", 8), "exceeds the 104857600-byte limit");
  try {
    SafetensorsFile file(dir / "missing.safetensors");
    ADD_FAILURE() << "a missing file opened";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

// A sharded model directory as save_pretrained writes it: the index names each tensor's
// shard; every tensor is found in its shard and read from there.
TEST_F(SafetensorsRead, AShardedDirectoryFindsEachTensorInTheShardItsIndexNames) {
  const std::string one = bytes_of(std::vector<float>{1, 2});
  write_file("model-00001-of-00002.safetensors",
             R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", one);
  write_file("model-00002-of-00002.safetensors",
             R"({"b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )"
             R"("c": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
             bytes_of(std::vector<float>{3, 4}));
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 16}, "weight_map": {"a": "model-00001-of-00002.safetensors", )"
      << R"("b": "model-00002-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})";
  const SafetensorsDir dir(dir_);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a", "b", "c"}));
  float v = 0;
  const SafetensorsDir::Found c = dir.at("c");
  c.file->read_floats(*c.tensor, 0, 1, &v);
  EXPECT_EQ(v, 4.0f);
  EXPECT_EQ(c.file->path().filename(), "model-00002-of-00002.safetensors");
  EXPECT_THROW(dir.at("d"), SafetensorsError);
}

TEST_F(SafetensorsRead, AnIndexAndShardsThatDisagreeAreRefusedNamingTheFileAndTheTensor) {
  const std::string a = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  const std::string ab = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )"
                         R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  const std::string four(4, '\0'), eight(8, '\0');
  struct Case {
    std::string shard_header, shard_data, index, says;
  };
  const std::vector<Case> cases = {
      {a, four, R"({"weight_map": {"a": "s.safetensors", "b": "gone.safetensors"}})",
       "gone.safetensors: is missing: the index names it for tensor \"b\""},
      {a, four, R"({"weight_map": {"a": "s.safetensors", "b": "s.safetensors"}})",
       "s.safetensors: does not hold tensor \"b\", which the index"},
      {ab, eight, R"({"weight_map": {"a": "s.safetensors"}})",
       "s.safetensors: holds tensor \"b\", which the index"},
      {a, four, R"({"weight_map": {"a": "../s.safetensors"}})",
       "weight_map \"a\" names \"../s.safetensors\", not a file in the model's directory"},
      {a, four, R"({"weight_map": {"a": "/etc/s.safetensors"}})", "not a file in the model's directory"},
      {a, four, R"({"weight_map": {"a": 3}})", "weight_map \"a\" is a number, not a shard file name"},
      {a, four, R"({"metadata": {"total_size": -1}, "weight_map": {}})", "metadata.total_size is negative"},
      {a, four, R"({"weight_map": {"a": "s.safetensors", "a": "s.safetensors"}})", "appears twice"},
      {a, four, R"({"metadata": {}})", "no key \"weight_map\""},
  };
  for (const Case& c : cases) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    write_file("s.safetensors", c.shard_header, c.shard_data);
    std::ofstream(dir_ / "model.safetensors.index.json") << c.index;
    try {
      SafetensorsDir dir(dir_);
      ADD_FAILURE() << c.index << " was accepted";
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.index << "\n" << e.what();
    }
  }
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  try {
    SafetensorsDir dir(dir_);
    ADD_FAILURE() << "an empty directory opened";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("holds neither model.safetensors nor model.safetensors.index.json"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace axonn
