#include "trainer/data/llmc_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace axonn {
namespace {

// Ids are staged in a buffer of this many bytes between writes (a multiple of 2 and 4).
constexpr size_t kBufferBytes = size_t{4} << 20;

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

void put_le32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// write(2) until every byte is out; DataError naming `path` otherwise.
void write_all(int fd, const unsigned char* in, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t put = ::write(fd, in, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw DataError("cannot write " + in_quotes(path) + ": " + std::strerror(errno));
    in += put;
    n -= static_cast<size_t>(put);
  }
}

}  // namespace

LlmcWriter::LlmcWriter(std::string path, int64_t vocab)
    : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(::getpid())), vocab_(vocab),
      width_(vocab <= 65536 ? 2 : 4) {
  if (vocab < 1 || vocab > int64_t{std::numeric_limits<int32_t>::max()} + 1)
    throw DataError("cannot write " + in_quotes(path_) + " for a vocabulary of " + std::to_string(vocab) +
                    " ids: llm.c token files hold ids in [0, 2^31)");
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw DataError("cannot create " + in_quotes(tmp_) + ": " + std::strerror(errno));
  buffer_.reserve(kBufferBytes);
  buffer_.resize(kLlmcHeaderBytes);  // zeros now; the count is known at finish()
}

LlmcWriter::~LlmcWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

std::string LlmcWriter::description() const { return width_ == 2 ? "llm.c tokens (uint16)" : "llm.c llama-3 tokens (uint32)"; }

void LlmcWriter::add_document(std::span<const int32_t> ids) {
  if (fd_ < 0) throw DataError("llm.c writer for " + in_quotes(path_) + " is already finished");
  if (tokens_ + static_cast<int64_t>(ids.size()) > std::numeric_limits<int32_t>::max())
    throw DataError("cannot write more than 2^31-1 tokens to " + in_quotes(path_) +
                    ": llm.c's header counts them in an int32; write a Megatron dataset (--output-format megatron) "
                    "or split the input");
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_)
      throw DataError("token id " + std::to_string(id) + " at position " + std::to_string(tokens_ + int64_t(i)) +
                      " is outside the vocabulary [0, " + std::to_string(vocab_) + ") of llm.c's " +
                      (width_ == 2 ? "uint16" : "uint32") + " tokens; cannot write " + in_quotes(path_));
    if (buffer_.size() + 4 > kBufferBytes) flush_buffer();
    for (int b = 0; b < width_; ++b) buffer_.push_back(static_cast<unsigned char>(static_cast<uint32_t>(id) >> (8 * b)));
  }
  tokens_ += static_cast<int64_t>(ids.size());
}

void LlmcWriter::flush_buffer() {
  write_all(fd_, buffer_.data(), buffer_.size(), tmp_);
  buffer_.clear();
}

void LlmcWriter::finish() {
  if (fd_ < 0) throw DataError("llm.c writer for " + in_quotes(path_) + " is already finished");
  if (tokens_ == 0) throw DataError("refusing to write " + in_quotes(path_) + " with no tokens");
  flush_buffer();
  unsigned char header[12];
  put_le32(header, static_cast<uint32_t>(width_ == 2 ? kLlmcMagic : kLlmcLlama3Magic));
  put_le32(header + 4, static_cast<uint32_t>(width_ == 2 ? kLlmcVersion : kLlmcLlama3Version));
  put_le32(header + 8, static_cast<uint32_t>(tokens_));
  if (::pwrite(fd_, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    throw DataError("cannot write the header of " + in_quotes(tmp_) + ": " + std::strerror(errno));
  if (::fsync(fd_) != 0) throw DataError("cannot sync " + in_quotes(tmp_) + ": " + std::strerror(errno));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    throw DataError("cannot close " + in_quotes(tmp_) + ": " + std::strerror(errno));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw DataError("cannot rename " + in_quotes(tmp_) + " to " + in_quotes(path_) + ": " + std::strerror(err));
  }
}

}  // namespace axonn
