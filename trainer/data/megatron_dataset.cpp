#include "trainer/data/megatron_dataset.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace axonn {
namespace {

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

[[noreturn]] void fail_errno(const char* what, const std::string& path) {
  throw DataError(std::string(what).append(" ").append(quoted(path)).append(": ").append(std::strerror(errno)));
}

void write_all(int fd, const unsigned char* in, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t put = ::write(fd, in, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail_errno("cannot write", path);
    in += put;
    n -= static_cast<size_t>(put);
  }
}

void sync_and_close(int fd, const std::string& path) {
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_errno("cannot fsync", path);
  }
  if (::close(fd) != 0) fail_errno("cannot close", path);
}

void put_le(std::vector<unsigned char>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

int dtype_code(TokenType type) {
  switch (type) {
    case TokenType::uint8: return 1;
    case TokenType::int8: return 2;
    case TokenType::int16: return 3;
    case TokenType::int32: return 4;
    case TokenType::int64: return 5;
    case TokenType::uint16: return 8;
  }
  return 0;
}

// The ids a dtype holds, [lowest, highest].
void dtype_limits(TokenType type, int64_t& lowest, int64_t& highest) {
  switch (type) {
    case TokenType::uint8: lowest = 0, highest = 255; return;
    case TokenType::int8: lowest = -128, highest = 127; return;
    case TokenType::uint16: lowest = 0, highest = 65535; return;
    case TokenType::int16: lowest = -32768, highest = 32767; return;
    case TokenType::int32:
    case TokenType::int64: lowest = std::numeric_limits<int32_t>::min(), highest = std::numeric_limits<int32_t>::max();
  }
}

constexpr size_t kBufferBytes = size_t{1} << 20;

}  // namespace

std::string megatron_prefix_of(const std::string& path) {
  if (ends_with(path, ".bin") || ends_with(path, ".idx")) return path.substr(0, path.size() - 4);
  return path;
}

std::optional<std::string> megatron_prefix(const std::string& path, const std::string& format) {
  if (format == "megatron") return megatron_prefix_of(path);
  if (format != "auto" || path.empty()) return std::nullopt;
  if (ends_with(path, ".idx")) return megatron_prefix_of(path);
  if (ends_with(path, ".bin")) {
    const std::string prefix = megatron_prefix_of(path);
    if (exists(prefix + ".idx")) return prefix;
    return std::nullopt;
  }
  if (!exists(path) && is_file(path + ".bin") && is_file(path + ".idx")) return path;
  return std::nullopt;
}

MegatronDataset MegatronDataset::open(const std::string& path) {
  MegatronDataset data;
  data.prefix_ = megatron_prefix_of(path);
  const std::string idx = data.idx_path(), bin = data.bin_path();
  const bool have_idx = exists(idx), have_bin = exists(bin);
  if (!have_idx || !have_bin)
    throw DataError("Megatron dataset " + quoted(data.prefix_) + " needs both " + quoted(bin) + " and " + quoted(idx) +
                    ", but " + (!have_idx && !have_bin ? "neither exists" : quoted(have_idx ? bin : idx) + " is missing") +
                    " (data.path names the prefix, or either file; a relative data.path resolves against the job "
                    "TOML's folder)");
  data.idx_ = MappedFile::open(idx);
  data.bin_ = MappedFile::open(bin);
  static const unsigned char kNone = 0;
  const unsigned char* bytes = data.idx_->data() != nullptr ? data.idx_->data() : &kNone;
  data.index_ = parse_megatron_index(bytes, data.idx_->size(), data.bin_->size(), idx, bin);
  data.bin_->advise_random();
  return data;
}

std::string MegatronDataset::format_name() const {
  return std::string("Megatron indexed dataset (").append(token_type_name(index_.dtype)).append(")");
}

TokenData MegatronDataset::tokens() const {
  const std::string description = prefix_ + " (" + format_name() + ", " + std::to_string(index_.token_count) +
                                  " tokens in " + std::to_string(index_.document_count) + " documents)";
  return TokenData::from_mapped(bin_, 0, index_.dtype, index_.token_count, description);
}

// ---- writer ----------------------------------------------------------------------------------

TokenType MegatronWriter::dtype_for_vocab(int64_t vocab) {
  return vocab < 65500 ? TokenType::uint16 : TokenType::int32;
}

MegatronWriter::MegatronWriter(std::string prefix, TokenType dtype)
    : prefix_(std::move(prefix)),
      dtype_(dtype),
      bin_tmp_(prefix_ + ".bin.tmp-" + std::to_string(::getpid())),
      idx_tmp_(prefix_ + ".idx.tmp-" + std::to_string(::getpid())) {
  bin_fd_ = ::open(bin_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (bin_fd_ < 0) fail_errno("cannot create", bin_tmp_);
  buffer_.reserve(kBufferBytes);
}

MegatronWriter::~MegatronWriter() {
  if (finished_) return;
  if (bin_fd_ >= 0) ::close(bin_fd_);
  ::unlink(bin_tmp_.c_str());
  ::unlink(idx_tmp_.c_str());
}

void MegatronWriter::flush() {
  write_all(bin_fd_, buffer_.data(), buffer_.size(), bin_tmp_);
  buffer_.clear();
}

void MegatronWriter::add_document(std::span<const int32_t> ids) {
  if (finished_) throw DataError("MegatronWriter for " + quoted(prefix_) + ": add_document after finish()");
  if (ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw DataError("document " + std::to_string(lengths_.size()) + " for " + quoted(prefix_) + " has " +
                    std::to_string(ids.size()) +
                    " tokens, more than a Megatron sequence length (int32) holds; split it");
  int64_t lowest = 0, highest = 0;
  dtype_limits(dtype_, lowest, highest);
  const int width = token_type_bytes(dtype_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < lowest || id > highest)
      throw DataError("token id " + std::to_string(id) + " at position " + std::to_string(i) + " of document " +
                      std::to_string(lengths_.size()) + " does not fit " + token_type_name(dtype_) + " (" +
                      std::to_string(lowest) + ".." + std::to_string(highest) + "); cannot write " +
                      quoted(prefix_ + ".bin") + ": choose the dtype with MegatronWriter::dtype_for_vocab");
    if (buffer_.size() + static_cast<size_t>(width) > kBufferBytes) flush();
    put_le(buffer_, static_cast<uint64_t>(static_cast<int64_t>(id)), width);
  }
  lengths_.push_back(static_cast<int32_t>(ids.size()));
  tokens_ += static_cast<int64_t>(ids.size());
}

std::string MegatronWriter::description() const {
  return std::string("Megatron indexed dataset (") + token_type_name(dtype_) + ")";
}

void MegatronWriter::finish() {
  if (finished_) throw DataError("MegatronWriter for " + quoted(prefix_) + ": finish() called twice");
  if (tokens_ == 0) throw DataError("refusing to write " + quoted(prefix_ + ".bin") + " and .idx with no tokens");
  flush();
  const int bin_fd = bin_fd_;
  bin_fd_ = -1;
  sync_and_close(bin_fd, bin_tmp_);

  // The .idx: header, then lengths, pointers and document indices, streamed through the
  // buffer (it is empty after flush()).
  const int idx_fd = ::open(idx_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (idx_fd < 0) fail_errno("cannot create", idx_tmp_);
  const auto put = [&](uint64_t v, int bytes) {
    if (buffer_.size() + 8 > kBufferBytes) {
      try {
        write_all(idx_fd, buffer_.data(), buffer_.size(), idx_tmp_);
      } catch (...) {
        ::close(idx_fd);
        throw;
      }
      buffer_.clear();
    }
    put_le(buffer_, v, bytes);
  };
  for (const char c : kMegatronMagic) put(static_cast<unsigned char>(c), 1);
  put(1, 8);  // version
  put(static_cast<uint64_t>(dtype_code(dtype_)), 1);
  const auto sequences = static_cast<uint64_t>(lengths_.size());
  put(sequences, 8);
  put(sequences + 1, 8);  // document_indices entries
  for (const int32_t length : lengths_) put(static_cast<uint32_t>(length), 4);
  const int width = token_type_bytes(dtype_);
  uint64_t pointer = 0;
  for (const int32_t length : lengths_) {
    put(pointer, 8);
    pointer += static_cast<uint64_t>(length) * static_cast<uint64_t>(width);
  }
  for (uint64_t i = 0; i <= sequences; ++i) put(i, 8);
  try {
    write_all(idx_fd, buffer_.data(), buffer_.size(), idx_tmp_);
  } catch (...) {
    ::close(idx_fd);
    throw;
  }
  buffer_.clear();
  sync_and_close(idx_fd, idx_tmp_);

  const std::string bin = prefix_ + ".bin", idx = prefix_ + ".idx";
  if (::unlink(idx.c_str()) != 0 && errno != ENOENT) fail_errno("cannot remove the old", idx);
  if (::rename(bin_tmp_.c_str(), bin.c_str()) != 0)
    throw DataError("cannot rename " + quoted(bin_tmp_) + " to " + quoted(bin) + ": " + std::strerror(errno));
  if (::rename(idx_tmp_.c_str(), idx.c_str()) != 0)
    throw DataError("cannot rename " + quoted(idx_tmp_) + " to " + quoted(idx) + ": " + std::strerror(errno));
  finished_ = true;
}

}  // namespace axonn
