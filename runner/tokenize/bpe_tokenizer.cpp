#include "runner/tokenize/bpe_tokenizer.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runner/tokenize/bpe_model.hpp"
#include "runner/tokenize/pretokenize.hpp"
#include "runner/tokenize/unicode.hpp"

namespace axonn {
namespace {

using tokenize::BpeModel;

// Added tokens as a byte trie, for the leftmost-longest match at each position.
class AddedTokenTrie {
 public:
  explicit AddedTokenTrie(const std::vector<tokenize::AddedToken>& tokens) {
    nodes_.emplace_back();
    for (const tokenize::AddedToken& t : tokens) {
      size_t node = 0;
      for (char c : t.content) {
        const uint64_t key = edge_key(node, c);
        auto it = edges_.find(key);
        if (it == edges_.end()) {
          it = edges_.emplace(key, nodes_.size()).first;
          nodes_.emplace_back();
        }
        node = it->second;
      }
      nodes_[node].id = t.id;
      first_bytes_[static_cast<unsigned char>(t.content[0])] = true;
    }
  }

  // The longest added token starting at text[at]: its length and id, or length 0.
  std::pair<size_t, int32_t> match(std::string_view text, size_t at) const {
    if (!first_bytes_[static_cast<unsigned char>(text[at])]) return {0, 0};
    std::pair<size_t, int32_t> best{0, 0};
    size_t node = 0;
    for (size_t i = at; i < text.size(); ++i) {
      const auto it = edges_.find(edge_key(node, text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      if (nodes_[node].id >= 0) best = {i + 1 - at, nodes_[node].id};
    }
    return best;
  }

 private:
  struct Node {
    int32_t id = -1;
  };
  static uint64_t edge_key(size_t node, char c) { return (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c); }
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, size_t> edges_;
  std::array<bool, 256> first_bytes_{};
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeModel model) : m_(std::move(model)), added_(m_.added) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    Scratch s;
    size_t piece_start = 0;
    for (size_t i = 0; i < text.size();) {
      const auto [len, id] = m_.added.empty() ? std::pair<size_t, int32_t>{0, 0} : added_.match(text, i);
      if (len == 0) {
        ++i;
        continue;
      }
      encode_piece(text.substr(piece_start, i - piece_start), s, ids);
      ids.push_back(id);
      i += len;
      piece_start = i;
    }
    encode_piece(text.substr(piece_start), s, ids);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= m_.tokens.size() || !m_.has_token[static_cast<size_t>(id)]) {
        throw TokenizerError(m_.file + ": no token has id " + std::to_string(id) + " (ids run from 0 to " +
                             std::to_string(m_.tokens.size() - 1) + "): decode ids this tokenizer made");
      }
      out.append(m_.tokens[static_cast<size_t>(id)]);
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(m_.tokens.size()); }
  std::optional<int32_t> end_of_document() const override { return m_.end_of_document; }
  std::string description() const override { return m_.description; }

 private:
  struct Scratch {
    std::string normalized, prefixed;
    tokenize::DecodedText decoded;
    std::vector<std::string_view> pieces;
  };

  // Text between added tokens: normalize, pre-tokenize, merge each pre-token.
  void encode_piece(std::string_view piece, Scratch& s, std::vector<int32_t>& ids) const {
    if (piece.empty()) return;
    if (m_.nfc) {
      s.normalized = tokenize::nfc(piece);
      piece = s.normalized;
    }
    if (m_.add_prefix_space && piece[0] != ' ') {
      // Sized first: GCC 12 -O3 misreads assign(" ").append(piece) as an overlapping copy.
      s.prefixed.resize(piece.size() + 1);
      s.prefixed[0] = ' ';
      std::copy(piece.begin(), piece.end(), s.prefixed.begin() + 1);
      piece = s.prefixed;
    }
    s.pieces.clear();
    if (m_.pattern) {
      tokenize::split_pretokens(*m_.pattern, piece, s.decoded, s.pieces);
    } else {
      s.pieces.push_back(piece);
    }
    for (std::string_view word : s.pieces) encode_word(word, ids);
  }

  void encode_word(std::string_view word, std::vector<int32_t>& ids) const {
    if (word.size() == 1) {
      ids.push_back(m_.byte_ids[static_cast<unsigned char>(word[0])]);
      return;
    }
    if (m_.ignore_merges) {
      const auto it = m_.token_ids.find(word);
      if (it != m_.token_ids.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    const bool cacheable = word.size() <= kMaxCachedBytes;
    if (cacheable) {
      const std::lock_guard<std::mutex> lock(cache_mutex_);
      const auto it = cache_.find(word);
      if (it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t first = ids.size();
    merge(word, ids);
    std::vector<int32_t> merged(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end());
    if (cacheable) {
      const std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      cache_.emplace(std::string(word), std::move(merged));
    }
  }

  // The pre-token's bytes as symbols, merged by rank: a doubly linked list over the symbols
  // and a min-heap of candidate pairs (rank, then position). A candidate whose symbols have
  // changed since it was pushed is stale and skipped. O(n log n) in the word's bytes; the
  // ids are appended to `out`.
  void merge(std::string_view word, std::vector<int32_t>& out) const {
    struct Symbol {
      int32_t id;
      int32_t prev, next;  // -1: none
      bool alive;
    };
    struct Candidate {
      int32_t rank, left, left_id, right_id, merged;
      // std::*_heap keep the largest first: "greater" here is lower rank, then further left.
      bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    // Reused across calls on this thread: a word costs no allocation once they have grown.
    thread_local std::vector<Symbol> sym;
    thread_local std::vector<Candidate> heap;
    const auto n = static_cast<int32_t>(word.size());
    sym.resize(word.size());
    heap.clear();
    for (int32_t i = 0; i < n; ++i) {
      sym[static_cast<size_t>(i)] = {m_.byte_ids[static_cast<unsigned char>(word[static_cast<size_t>(i)])], i - 1,
                                     i + 1 < n ? i + 1 : -1, true};
    }
    auto push = [&](int32_t left) {
      if (left < 0) return;
      const int32_t right = sym[static_cast<size_t>(left)].next;
      if (right < 0) return;
      const int32_t a = sym[static_cast<size_t>(left)].id, b = sym[static_cast<size_t>(right)].id;
      const auto it = m_.merges.find(BpeModel::merge_key(a, b));
      if (it == m_.merges.end()) return;
      heap.push_back({it->second.rank, left, a, b, it->second.merged});
      std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = sym[static_cast<size_t>(c.left)];
      if (!left.alive || left.id != c.left_id || left.next < 0) continue;
      Symbol& right = sym[static_cast<size_t>(left.next)];
      if (right.id != c.right_id) continue;
      left.id = c.merged;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = c.left;
      push(left.prev);
      push(c.left);
    }
    for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
  }

  static constexpr size_t kMaxCachedBytes = 64;
  static constexpr size_t kMaxCacheEntries = 1 << 18;

  BpeModel m_;
  AddedTokenTrie added_;
  mutable std::mutex cache_mutex_;
  mutable tokenize::StringMap<std::vector<int32_t>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_bpe_tokenizer_json(std::string_view json, const std::string& file) {
  return std::make_unique<BpeTokenizer>(tokenize::read_bpe_model(json, file));
}

}  // namespace axonn
