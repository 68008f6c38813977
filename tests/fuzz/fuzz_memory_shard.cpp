// libFuzzer target for a memory copy's shard (checkpoint/memory_shard.hpp) and the requests
// for its pieces (checkpoint/memory_pieces.hpp): the bytes a restart reads back from a node's
// tmpfs, the shard tables it gathers from the other nodes, and the requests other ranks send.
// A damaged or stray file must be refused, never loaded; a damaged request refused, never
// answered from outside the shard.
//
// The input is the file, and its bytes as int64s are a request to a node holding two fixed
// shards. Beyond ASan and UBSan: the file decodes or throws FormatError or ChecksumMismatch
// (anything else escapes and aborts); a shard it accepts encodes back to exactly the input
// (one spelling per shard: nothing in the file is ignored), and its table alone decodes to the
// same slices; every message is one printable line, however the file names its tensors. The
// request is answered with exactly its regions' floats, or refused with FormatError.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/memory_pieces.hpp"
#include "checkpoint/memory_shard.hpp"
#include "fuzz_checks.hpp"

using axonn::fuzz::require;

namespace {

void check_file(std::span<const char> bytes) {
  const std::string name = "/dev/shm/axonn-7-0/n0/.tmp-step-000000012/shard-00003.mem";
  try {
    const axonn::MemoryShard shard = axonn::decode_memory_shard(bytes, name);
    require(shard.header.rank < shard.header.world);
    const std::vector<char> again = axonn::encode_memory_shard(shard.header, shard.save_token, shard.slices,
                                                               shard.metadata ? &*shard.metadata : nullptr);
    require(std::vector<char>(bytes.begin(), bytes.end()) == again, "a decoded shard encodes to other bytes");
    size_t table_bytes = 0;
    const axonn::MemoryShard table = axonn::decode_memory_shard_table(bytes, name, &table_bytes);
    require(table.slices.size() == shard.slices.size() && table_bytes <= bytes.size(), "the table differs");
    const axonn::MemoryShard alone = axonn::decode_memory_shard_table(bytes.first(table_bytes), name);
    for (size_t i = 0; i < shard.slices.size(); ++i)
      require(alone.slices[i].name == shard.slices[i].name && alone.slices[i].rect == shard.slices[i].rect,
              "the table alone differs");
  } catch (const axonn::CheckpointError& e) {  // FormatError or ChecksumMismatch
    const std::string message = e.what();
    axonn::fuzz::require_printable_line(message, 4096);
    require(message.find(name) != std::string::npos, message);
  }
}

// Rank 1's and rank 4's shards: a 2x3 slice of a 4x3 tensor, and a vector.
const std::map<int, axonn::MemoryShard>& held() {
  static const std::vector<float> matrix = {1, 2, 3, 4, 5, 6}, vector = {7, 8, 9};
  static const std::map<int, axonn::MemoryShard> shards = [] {
    std::map<int, axonn::MemoryShard> made;
    const std::vector<axonn::TensorSlice> one = {
        axonn::TensorSlice{"w", {4, 3}, axonn::Rect{{2, 0}, {2, 3}}, matrix.data()}};
    const std::vector<axonn::TensorSlice> four = {axonn::TensorSlice{"b", {3}, axonn::Rect{{0}, {3}}, vector.data()}};
    made[1] = axonn::decode_memory_shard(axonn::encode_memory_shard({12, 1, 5}, "t", one, nullptr), "one");
    made[4] = axonn::decode_memory_shard(axonn::encode_memory_shard({12, 4, 5}, "t", four, nullptr), "four");
    return made;
  }();
  return shards;
}

void check_request(std::span<const char> bytes) {
  std::vector<int64_t> words(bytes.size() / sizeof(int64_t));
  if (!words.empty()) std::memcpy(words.data(), bytes.data(), words.size() * sizeof(int64_t));
  try {
    const std::vector<char> answer = axonn::answer_piece_request(held(), words, "rank 9");
    // Answered: whole floats (each piece's region, copied from inside its slice).
    require(answer.size() % sizeof(float) == 0, "an answer of a part of a float");
  } catch (const axonn::FormatError& e) {
    const std::string message = e.what();
    axonn::fuzz::require_printable_line(message, 4096);
    require(message.find("rank 9") != std::string::npos, message);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
  check_file(bytes);
  check_request(bytes);
  return 0;
}
