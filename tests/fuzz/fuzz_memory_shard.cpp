// libFuzzer target for a memory copy's shard (checkpoint/memory_shard.hpp): the bytes a
// restart reads back from a node's tmpfs, or receives from another node, before it writes them
// into a checkpoint step. A damaged or stray file must be refused, never loaded.
//
// The input is the file. Beyond ASan and UBSan: it decodes or throws FormatError or
// ChecksumMismatch (anything else escapes and aborts); a shard it accepts encodes back to
// exactly the input (one spelling per shard: nothing in the file is ignored); every message is
// one printable line, however the file names its tensors.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/memory_shard.hpp"
#include "fuzz_checks.hpp"

using axonn::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
  const std::string name = "/dev/shm/axonn-7-0/n0/.tmp-step-000000012/shard-00003.mem";
  try {
    const axonn::MemoryShard shard = axonn::decode_memory_shard(bytes, name);
    require(shard.header.rank < shard.header.world);
    const std::vector<char> again = axonn::encode_memory_shard(shard.header, shard.save_token, shard.slices,
                                                               shard.metadata ? &*shard.metadata : nullptr);
    require(std::vector<char>(bytes.begin(), bytes.end()) == again, "a decoded shard encodes to other bytes");
  } catch (const axonn::CheckpointError& e) {  // FormatError or ChecksumMismatch
    const std::string message = e.what();
    axonn::fuzz::require_printable_line(message, 4096);
    require(message.find(name) != std::string::npos, message);
  }
  return 0;
}
