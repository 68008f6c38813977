#pragma once
// Reading a memory shard's pieces (memory_pieces.hpp) straight from its file in the node's
// memory (a tmpfs): a restore's ranks read the shards their own node holds in place instead of
// asking the rank that verified them, and that rank answers the other nodes' requests from the
// file too, so a piece moves once from the file (rows scattered by preadv: raw_read.hpp) and no
// rank holds a copy of a whole shard.
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/memory_pieces.hpp"
#include "checkpoint/memory_shard.hpp"
#include "checkpoint/raw_read.hpp"

namespace axonn {

// A shard file whose data was verified (verify_memory_shard): reads are checked only against
// its table, and the file's header and table must be `table_bytes` (the bytes the pieces were
// planned with: a copy of the same shard), else FormatError naming the file. CheckpointError
// naming the file when it cannot be read or ends early.
class MemoryShardFile {
 public:
  // `table`: decoded from `table_bytes` (decode_memory_shard_table); it must outlive this.
  MemoryShardFile(const std::filesystem::path& path, std::string_view table_bytes, const MemoryShard& table);

  // Copies `pieces`, all of this shard, into into[p.read] (row-major over reads[p.read].rect).
  void read_pieces(std::span<const MemoryPiece> pieces, std::span<const SliceRead> reads,
                   std::span<float* const> into) const;
  // Copies `region` (global coordinates, inside slice `slice`) into `dst`, row-major over
  // `dst_rect` (which holds the region).
  void read_region(size_t slice, const Rect& region, float* dst, const Rect& dst_rect) const;

  const MemoryShard& table() const { return *table_; }

 private:
  RawFile file_;
  std::string name_;
  const MemoryShard* table_;
  std::vector<int64_t> slice_at_;  // [slice] the file byte its data starts at
};

// The answer to `request` (memory_pieces.hpp) read from the files of the shards a server keeps
// (`file_of`: that shard's file, or null for one it does not keep). Checked and thrown as
// check_piece_request; CheckpointError naming a file that cannot be read.
std::vector<char> answer_piece_request_from_files(std::span<const int64_t> request,
                                                  const std::function<const MemoryShardFile*(int shard)>& file_of,
                                                  const std::string& who);

}  // namespace axonn
