#include "checkpoint/memory_pieces.hpp"

#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/tensor_table.hpp"

namespace axonn {
namespace {

constexpr const char* kOperation = "memory copy restore";

// A stored slice's place: which shard, which of its slices.
struct SliceAt {
  int shard = 0;
  size_t slice = 0;
};

[[noreturn]] void bad_request(const std::string& who, const std::string& why) {
  throw FormatError("", kOperation, "the request of " + who + " for memory copy pieces " + why);
}

}  // namespace

std::vector<MemoryPiece> plan_memory_pieces(std::span<const MemoryShard> tables, std::span<const SliceRead> reads,
                                            const std::string& where) {
  // The stored tensors, each with its rectangles and where each lies.
  std::vector<TensorInfo> table;
  std::map<std::string, size_t> index;
  std::vector<std::vector<SliceAt>> places;
  for (size_t r = 0; r < tables.size(); ++r) {
    for (size_t i = 0; i < tables[r].slices.size(); ++i) {
      const TensorSlice& s = tables[r].slices[i];
      auto [it, added] = index.try_emplace(s.name, table.size());
      if (added) {
        table.push_back(TensorInfo{s.name, s.global_shape, {}});
        places.emplace_back();
      }
      TensorInfo& info = table[it->second];
      if (info.global_shape != s.global_shape)
        throw FormatError(where, kOperation,
                          "tensor '" + s.name + "' has global shape " + shape_string(info.global_shape) +
                              " in one shard of " + where + " and " + shape_string(s.global_shape) + " in rank " +
                              std::to_string(r) + "'s");
      StoredRect stored;
      stored.rank = static_cast<int>(r);
      stored.rect = s.rect;
      info.sources.push_back(std::move(stored));
      places[it->second].push_back({static_cast<int>(r), i});
    }
  }
  std::vector<MemoryPiece> pieces;
  for (size_t k = 0; k < reads.size(); ++k) {
    const SliceRead& read = reads[k];
    const TensorInfo& info = find_tensor(table, read.name, where);
    check_request(info, read.global_shape, read.rect, where);
    const size_t t = index.at(read.name);
    std::vector<Rect> sources;
    for (const StoredRect& s : info.sources) sources.push_back(s.rect);
    std::vector<CopyOp> copies;
    try {
      copies = plan_copy(sources, read.rect);
    } catch (const std::invalid_argument& e) {
      throw FormatError(where, kOperation,
                        "the shards of " + where + " do not hold tensor '" + read.name + "' exactly once: " + e.what());
    }
    for (CopyOp& c : copies)
      pieces.push_back({k, places[t][c.source].shard, places[t][c.source].slice, std::move(c.region)});
  }
  return pieces;
}

std::vector<int64_t> encode_piece_request(std::span<const MemoryPiece> pieces) {
  std::vector<int64_t> out;
  for (const MemoryPiece& p : pieces) {
    out.push_back(p.shard);
    out.push_back(static_cast<int64_t>(p.slice));
    out.push_back(static_cast<int64_t>(p.region.offset.size()));
    out.insert(out.end(), p.region.offset.begin(), p.region.offset.end());
    out.insert(out.end(), p.region.count.begin(), p.region.count.end());
  }
  return out;
}

std::vector<MemoryPiece> check_piece_request(std::span<const int64_t> request,
                                             const std::function<const MemoryShard*(int shard)>& table_of,
                                             const std::string& who) {
  std::vector<MemoryPiece> pieces;
  for (size_t at = 0; at < request.size();) {
    if (request.size() - at < 3) bad_request(who, "ends inside a piece");
    const int64_t shard = request[at], slice = request[at + 1], dims = request[at + 2];
    at += 3;
    if (dims < 0 || static_cast<uint64_t>(dims) > (request.size() - at) / 2) bad_request(who, "ends inside a piece");
    Rect region;
    region.offset.assign(request.begin() + static_cast<std::ptrdiff_t>(at),
                         request.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(dims)));
    at += static_cast<size_t>(dims);
    region.count.assign(request.begin() + static_cast<std::ptrdiff_t>(at),
                        request.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(dims)));
    at += static_cast<size_t>(dims);
    const MemoryShard* table =
        shard >= 0 && shard <= std::numeric_limits<int>::max() ? table_of(static_cast<int>(shard)) : nullptr;
    if (table == nullptr)
      bad_request(who, "names rank " + std::to_string(shard) + "'s shard, which this node does not hold");
    if (slice < 0 || static_cast<size_t>(slice) >= table->slices.size())
      bad_request(who, "names slice " + std::to_string(slice) + " of rank " + std::to_string(shard) +
                           "'s shard, which has " + std::to_string(table->slices.size()));
    const TensorSlice& stored = table->slices[static_cast<size_t>(slice)];
    // Inside the stored rectangle, written so that a damaged request cannot overflow.
    bool inside = region.offset.size() == stored.rect.offset.size();
    for (size_t d = 0; inside && d < region.offset.size(); ++d) {
      const int64_t end = stored.rect.offset[d] + stored.rect.count[d];
      inside = region.offset[d] >= stored.rect.offset[d] && region.offset[d] < end && region.count[d] > 0 &&
               region.count[d] <= end - region.offset[d];
    }
    if (!inside || region.offset.empty())
      bad_request(who, "asks for " + rect_string(region) + " of tensor '" + stored.name + "', outside the stored " +
                           rect_string(stored.rect));
    pieces.push_back({pieces.size(), static_cast<int>(shard), static_cast<size_t>(slice), std::move(region)});
  }
  return pieces;
}

std::vector<char> answer_piece_request(const std::map<int, MemoryShard>& held, std::span<const int64_t> request,
                                       const std::string& who) {
  const std::vector<MemoryPiece> pieces = check_piece_request(
      request,
      [&](int shard) {
        const auto it = held.find(shard);
        return it != held.end() ? &it->second : nullptr;
      },
      who);
  return answer_pieces(pieces, [&](const MemoryPiece& p, float* region) {
    const TensorSlice& stored = held.at(p.shard).slices[p.slice];
    copy_region(stored.data, stored.rect, region, p.region, p.region);
  });
}

std::vector<char> answer_pieces(std::span<const MemoryPiece> pieces,
                                const std::function<void(const MemoryPiece& piece, float* region)>& copy) {
  size_t floats = 0;
  for (const MemoryPiece& p : pieces) floats += static_cast<size_t>(element_count(p.region));  // checked: in a slice
  std::vector<char> answer(floats * sizeof(float));
  float* to = reinterpret_cast<float*>(answer.data());  // a vector's storage is aligned for any scalar
  for (const MemoryPiece& p : pieces) {
    copy(p, to);
    to += element_count(p.region);
  }
  return answer;
}

void place_piece_answer(std::span<const MemoryPiece> pieces, std::span<const char> answer,
                        std::span<const SliceRead> reads, std::span<float* const> into, const std::string& who) {
  size_t expected = 0;
  for (const MemoryPiece& p : pieces) expected += static_cast<size_t>(element_count(p.region)) * sizeof(float);
  if (answer.size() != expected)
    throw FormatError("", kOperation,
                      who + " answered " + std::to_string(answer.size()) + " bytes of memory copy pieces where " +
                          std::to_string(expected) + " were asked for");
  const float* from = reinterpret_cast<const float*>(answer.data());
  for (const MemoryPiece& p : pieces) {
    copy_region(from, p.region, into[p.read], reads[p.read].rect, p.region);
    from += element_count(p.region);
  }
}

}  // namespace axonn
