#pragma once
// Reading a memory shard's pieces (memory_pieces.hpp) straight from its file: a restore's ranks
// read the shards their own node holds in place, from the node's memory (a tmpfs), instead of
// asking the rank that verified them for an answer. Each piece then moves once, file to the
// read's buffer (rows scattered by preadv: raw_read.hpp), with no message, no answer buffer and
// no second copy; only the shards on other nodes travel over the network.
#include <filesystem>
#include <span>
#include <string_view>

#include "checkpoint/memory_pieces.hpp"
#include "checkpoint/memory_shard.hpp"

namespace axonn {

// Copies `pieces`, all of one shard, from that shard's file at `path` into into[p.read]
// (row-major over reads[p.read].rect). `table_bytes`: the shard's header and slice table as
// the restore gathered them (the first bytes decode_memory_shard_table reads), `table` decoded
// from them; the pieces were planned against it (plan_memory_pieces).
//
// The file's data must have been verified already (decode_memory_shard, by the rank that keeps
// the shard on this node): this reads its header and table again only to check that it is the
// same copy of the same shard, FormatError naming the file when they differ. CheckpointError
// naming the file when it cannot be read or ends early.
void read_memory_pieces(const std::filesystem::path& path, std::string_view table_bytes, const MemoryShard& table,
                        std::span<const MemoryPiece> pieces, std::span<const SliceRead> reads,
                        std::span<float* const> into);

}  // namespace axonn
