#include "trainer/data/token_data.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "trainer/data/mapped_file.hpp"
#include "trainer/data/megatron_dataset.hpp"
#include "trainer/data/token_file.hpp"

namespace axonn {
namespace {

// Mapped tokens are little-endian on disk and read as host integers.
static_assert(std::endian::native == std::endian::little, "mapped token files are read as host integers");

// One token of type T at p (no alignment assumed: memcpy compiles to one load).
template <typename T>
T load_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void widen(const unsigned char* in, int64_t n, int32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(load_le<T>(in + i * int64_t{sizeof(T)}));
}

template <typename T>
TokenData::IdRange range_of(const unsigned char* in, int64_t n) {
  T lo = load_le<T>(in), hi = lo;
  for (int64_t i = 1; i < n; ++i) {
    const T v = load_le<T>(in + i * int64_t{sizeof(T)});
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
}

template <typename T>
int64_t first_outside_of(const unsigned char* in, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    const auto v = static_cast<int64_t>(load_le<T>(in + i * int64_t{sizeof(T)}));
    if (v < 0 || v >= vocab) return i;
  }
  return -1;
}

// Calls f(T{}) with T the C++ type of `type`.
template <typename F>
auto with_type(TokenType type, F&& f) {
  switch (type) {
    case TokenType::uint8: return f(uint8_t{});
    case TokenType::int8: return f(int8_t{});
    case TokenType::uint16: return f(uint16_t{});
    case TokenType::int16: return f(int16_t{});
    case TokenType::int32: return f(int32_t{});
    case TokenType::int64: return f(int64_t{});
  }
  return f(int32_t{});
}

}  // namespace

int token_type_bytes(TokenType type) {
  return with_type(type, []<typename T>(T) { return static_cast<int>(sizeof(T)); });
}

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::uint8: return "uint8";
    case TokenType::int8: return "int8";
    case TokenType::uint16: return "uint16";
    case TokenType::int16: return "int16";
    case TokenType::int32: return "int32";
    case TokenType::int64: return "int64";
  }
  return "?";
}

TokenData TokenData::load(const DataSource& source) {
  if (source.path.empty()) return builtin_corpus();
  if (const std::optional<std::string> prefix = megatron_prefix(source.path, source.format))
    return MegatronDataset::open(*prefix).tokens();
  TokenFile file = read_token_file(source.path, source.format);
  const std::string description =
      source.path + " (" + file.format + ", " + std::to_string(file.tokens.size()) + " tokens)";
  return from_tokens(std::move(file.tokens), description);
}

TokenData TokenData::from_tokens(std::vector<int32_t> tokens, std::string description) {
  TokenData data;
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
  data.bytes_ = reinterpret_cast<const unsigned char*>(owned->data());
  data.size_ = static_cast<int64_t>(owned->size());
  data.owned_ = std::move(owned);
  data.description_ = std::move(description);
  return data;
}

TokenData TokenData::from_mapped(std::shared_ptr<const MappedFile> file, int64_t offset, TokenType type, int64_t count,
                                 std::string description) {
  const int64_t width = token_type_bytes(type);
  if (offset < 0 || count < 0 || offset > file->size() || count > (file->size() - offset) / width)
    throw std::out_of_range("TokenData::from_mapped: " + std::to_string(count) + " tokens of " +
                            std::to_string(width) + " bytes at byte " + std::to_string(offset) + " overrun " +
                            file->path() + " (" + std::to_string(file->size()) + " bytes)");
  TokenData data;
  data.bytes_ = file->data() == nullptr ? nullptr : file->data() + offset;
  data.type_ = type;
  data.size_ = count;
  data.mapped_ = std::move(file);
  data.description_ = std::move(description);
  return data;
}

void TokenData::copy(int64_t start, int64_t n, int32_t* out) const {
  if (start < 0 || n < 0 || start > size_ || n > size_ - start)
    throw std::out_of_range("TokenData::copy: tokens [" + std::to_string(start) + ", " + std::to_string(start) + "+" +
                            std::to_string(n) + ") are outside " + description_);
  if (n == 0) return;
  const unsigned char* in = bytes_ + start * token_type_bytes(type_);
  if (type_ == TokenType::int32) {
    std::memcpy(out, in, static_cast<size_t>(n) * sizeof(int32_t));
    return;
  }
  with_type(type_, [&]<typename T>(T) { widen<T>(in, n, out); });
}

int64_t TokenData::at(int64_t position) const {
  if (position < 0 || position >= size_)
    throw std::out_of_range("TokenData::at: position " + std::to_string(position) + " is outside " + description_);
  const unsigned char* p = bytes_ + position * token_type_bytes(type_);
  return with_type(type_, [&]<typename T>(T) { return static_cast<int64_t>(load_le<T>(p)); });
}

TokenData::IdRange TokenData::id_range() const {
  if (size_ == 0) return {};
  if (mapped_) mapped_->advise_sequential();
  const IdRange range = with_type(type_, [&]<typename T>(T) { return range_of<T>(bytes_, size_); });
  if (mapped_) mapped_->advise_random();  // what training does next
  return range;
}

int64_t TokenData::first_outside(int64_t vocab) const {
  return with_type(type_, [&]<typename T>(T) { return first_outside_of<T>(bytes_, size_, vocab); });
}

void TokenData::validate(int vocab, int sequence, int global_batch) const {
  if (vocab < 1 || sequence < 1 || global_batch < 1)
    throw DataError("cannot check " + description_ + " against vocab " + std::to_string(vocab) + ", sequence " +
                    std::to_string(sequence) + ", global batch " + std::to_string(global_batch) +
                    ": each must be at least 1");
  if (size_ == 0) throw DataError(description_ + " has no tokens; point data.path at a non-empty file");

  // One pass for the largest id (vectorizes); a second only when it is out of range, to name
  // the first offender's position.
  const IdRange range = id_range();
  if (range.lowest < 0 || range.highest >= vocab) {
    const int64_t bad = first_outside(vocab);
    throw DataError(description_ + " has token id " + std::to_string(at(bad)) + " at position " + std::to_string(bad) +
                    ", outside the model's vocabulary [0, " + std::to_string(vocab) + "); the largest id is " +
                    std::to_string(range.highest) + ": set model.vocab to at least " +
                    std::to_string(static_cast<uint64_t>(range.highest) + 1) + " or tokenize the data for this vocabulary");
  }

  // A sample is sequence+1 tokens and consecutive samples share one: (tokens-1)/sequence.
  const int64_t samples = (size() - 1) / sequence;
  if (samples < global_batch)
    throw DataError(description_ + " holds " + std::to_string(samples) + " samples of " + std::to_string(sequence + 1) +
                    " tokens (sequence " + std::to_string(sequence) + " + 1), fewer than one global batch of " +
                    std::to_string(global_batch) +
                    " samples; use a longer file, or a smaller training.global_batch or model.sequence (needs at "
                    "least " +
                    std::to_string(int64_t{global_batch} * sequence + 1) + " tokens)");
}

}  // namespace axonn
