#pragma once
// A memory copy's shard, shard-RRRRR.mem: what a rank keeps of one step in its node's RAM (a
// tmpfs) every checkpoint.memory_interval steps. Raw, so that a copy costs a few passes over
// the bytes and no HDF5; a restart that needs the step writes it as an HDF5 checkpoint step
// (memory_steps.hpp). Little-endian; str and bytes are a u64 length, then the bytes:
//
//   "AXONNMEM"  u64 version (1)  i64 step  i64 rank  i64 world (the ranks that wrote the step)
//   str save_token  u64 slices
//   per slice: str tensor, u64 n, i64 global_shape[n], i64 offset[n], i64 count[n],
//              u64 XXH3-64 of its float32 data
//   u64 has_metadata (1 in rank 0's shard: the step's Metadata follows, 0 elsewhere)
//   metadata: str layout, str model_config, i64 data_cursor, bytes rng_state,
//             u64 n, n x (str key, i64), u64 n, n x (str key, f64), u64 n, n x (str key, str)
//   u64 XXH3-64 of every header byte before it
//   the slices' float32 data, in slice order
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/metadata.hpp"
#include "checkpoint/rect.hpp"

namespace axonn {

// The first bytes of every memory shard: enough to file it (memory_steps.hpp).
struct MemoryShardHeader {
  int64_t step = 0;
  int64_t rank = 0;
  int64_t world = 0;
};
inline constexpr size_t kMemoryShardHeaderBytes = 40;  // magic, version, step, rank, world

struct MemoryShard {
  MemoryShardHeader header;
  std::string save_token;
  std::optional<Metadata> metadata;  // rank 0's
  std::vector<TensorSlice> slices;   // their data points into `data`
  std::vector<float> data;
};

// The shard as bytes. `metadata`: the step's, in rank 0's shard; nullptr elsewhere.
std::vector<char> encode_memory_shard(const MemoryShardHeader& header, const std::string& save_token,
                                      std::span<const TensorSlice> slices, const Metadata* metadata);
// The same into `out`, replacing what it held: a saver that copies every step reuses its pages.
void encode_memory_shard(const MemoryShardHeader& header, const std::string& save_token,
                         std::span<const TensorSlice> slices, const Metadata* metadata, std::vector<char>& out);

// The first kMemoryShardHeaderBytes parsed; FormatError naming `name` when they are not a
// memory shard's.
MemoryShardHeader decode_memory_shard_header(std::span<const char> bytes, const std::string& name);

// The shard without its data: header, slice table (data pointers null) and metadata, the
// header's hash checked; FormatError as below. `bytes` may end where the data starts; the
// table's length (where the data starts) goes to `table_bytes`. What a restore gathers from
// every shard to plan which pieces of them each rank of the new layout takes.
MemoryShard decode_memory_shard_table(std::span<const char> bytes, const std::string& name,
                                      size_t* table_bytes = nullptr);

// Parses and verifies the whole shard: FormatError (not a memory shard, cut short, a header
// whose hash differs) or ChecksumMismatch (a slice's data differs from its XXH3-64), naming
// `name` and the tensor. `table_bytes` as above.
MemoryShard decode_memory_shard(std::span<const char> bytes, const std::string& name, size_t* table_bytes = nullptr);

// The same checks without copying the data out: the table (data pointers null) of a shard
// whose every slice's data matched its XXH3-64 where it lies in `bytes`. A restore verifies
// the shards in its node's memory this way, mapped (raw_read.hpp), and reads them in place
// after (memory_pieces_read.hpp).
MemoryShard verify_memory_shard(std::span<const char> bytes, const std::string& name, size_t* table_bytes = nullptr);

}  // namespace axonn
