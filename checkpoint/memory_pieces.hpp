#pragma once
// Which pieces of a step's memory shards (memory_shard.hpp) fill a rank's slice reads, and
// the messages that move them: a restore from the nodes' memory (trainer/train/
// memory_copies.hpp) sends each rank of the new layout only the overlaps of its slices with
// the stored ones, never whole shards. Pure: the transport is the caller's.
//
// A request (one per serving rank) is int64s, per piece: shard, slice, n, offset[n],
// count[n]. Its answer is the pieces' float32 data in the same order, each region row-major.
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/memory_shard.hpp"
#include "checkpoint/rect.hpp"

namespace axonn {

struct MemoryPiece {
  size_t read = 0;   // index into the reads
  int shard = 0;     // the rank that wrote the shard
  size_t slice = 0;  // index into that shard's slices
  Rect region;       // global coordinates: the read's rectangle ∩ the stored slice's
};

// tables[r]: rank r's shard of the step without data (decode_memory_shard_table). Every
// element of every read is covered by exactly one piece, in shard order per read. Throws
// RequestMismatch for a tensor no shard holds or one of another global shape, FormatError
// when the shards do not cover a tensor exactly once; `where` names the step in messages.
std::vector<MemoryPiece> plan_memory_pieces(std::span<const MemoryShard> tables, std::span<const SliceRead> reads,
                                            const std::string& where);

std::vector<int64_t> encode_piece_request(std::span<const MemoryPiece> pieces);

// The pieces `request` asks for, each checked against the table of its shard (`table_of`: the
// server's table of that shard, data not read; null for a shard it does not hold), `read` set
// to the piece's place in the request. FormatError naming `who` (the requester) for a piece of a
// shard not held, a slice that does not exist or a region outside the slice: requests come
// from this build's plan_memory_pieces, so any of these is a bug or a damaged message.
std::vector<MemoryPiece> check_piece_request(std::span<const int64_t> request,
                                             const std::function<const MemoryShard*(int shard)>& table_of,
                                             const std::string& who);

// An answer to checked `pieces`: sized once, and `copy` called to write each piece's region,
// row-major, straight into its place (every piece checked first, so that a restore, which moves
// a rank's whole state through here, makes no other pass over it).
std::vector<char> answer_pieces(std::span<const MemoryPiece> pieces,
                                const std::function<void(const MemoryPiece& piece, float* region)>& copy);

// The answer to `request` from the shards a server holds in memory, verified
// (decode_memory_shard); checked as check_piece_request. A restore answers from the shards'
// files instead (memory_pieces_read.hpp).
std::vector<char> answer_piece_request(const std::map<int, MemoryShard>& held, std::span<const int64_t> request,
                                       const std::string& who);

// Copies an answer's regions into `into[p.read]` (row-major over reads[p.read].rect), for
// the pieces the request asked for, in its order. `answer` is aligned for floats (a vector's
// storage, as the peer link receives it). FormatError when the answer's size is not the
// pieces' (`who`: the server).
void place_piece_answer(std::span<const MemoryPiece> pieces, std::span<const char> answer,
                        std::span<const SliceRead> reads, std::span<float* const> into, const std::string& who);

}  // namespace axonn
