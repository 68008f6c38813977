#include "trainer/data/token_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "trainer/data/llmc_writer.hpp"
#include "trainer/data/token_data.hpp"

namespace axonn {
namespace {

// Files are read and written in pieces of this many bytes: large enough that a 100 MB file
// takes ~25 system calls, small enough that the staging buffer stays far below the token
// array (int32, 2-4x the file). A multiple of every token width (1, 2, 4 bytes).
constexpr int64_t kChunkBytes = int64_t{4} << 20;

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// An open file descriptor, closed on scope exit; every failure is a DataError naming the path.
class Fd {
 public:
  Fd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close_quietly(); }

  int64_t size() const {
    struct stat st {};
    if (fstat(fd_, &st) != 0) fail("cannot stat");
    if (!S_ISREG(st.st_mode)) throw DataError("data file " + quoted(path_) + " is not a regular file");
    return static_cast<int64_t>(st.st_size);
  }

  // Reads exactly `n` bytes; a file that ends early (it shrank while we read) is an error.
  void read_exact(unsigned char* out, int64_t n) const {
    while (n > 0) {
      const ssize_t got = ::read(fd_, out, static_cast<size_t>(std::min<int64_t>(n, kChunkBytes)));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("cannot read");
      if (got == 0) throw DataError("data file " + quoted(path_) + " ended early (did it change while being read?)");
      out += got;
      n -= got;
    }
  }

  [[noreturn]] void fail(const char* what) const {
    throw DataError(std::string(what) + " " + quoted(path_) + ": " + std::strerror(errno));
  }

 private:
  void close_quietly() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_;
  std::string path_;
};

Fd open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw DataError("cannot open data file " + quoted(path) + ": " + std::strerror(errno) +
                    " (check the path; a job's relative data.path resolves against the job TOML's folder)");
  return Fd(fd, path);
}

int32_t le32(const unsigned char* p) {
  const uint32_t v = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  return static_cast<int32_t>(v);
}


bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// How the payload after `header_bytes` is laid out.
struct Layout {
  std::string format;
  int64_t header_bytes = 0;
  int width = 1;  // bytes per token, little-endian unsigned
};

// Checks an llm.c header against the file size. `size` >= kLlmcHeaderBytes.
Layout llmc_layout(const std::string& path, const unsigned char* header, int64_t size) {
  const int32_t magic = le32(header);
  const int32_t version = le32(header + 4);
  const int32_t count = le32(header + 8);
  const bool llama3 = magic == kLlmcLlama3Magic;
  const int32_t expected_version = llama3 ? kLlmcLlama3Version : kLlmcVersion;
  if (version != expected_version)
    throw DataError("data file " + quoted(path) + " has llm.c magic " + std::to_string(magic) + " but header version " +
                    std::to_string(version) + "; axonn reads version " + std::to_string(expected_version) + " (" +
                    (llama3 ? "uint32" : "uint16") + " tokens): re-create it with llm.c's write_datafile");
  Layout layout{llama3 ? "llm.c llama-3 tokens" : "llm.c tokens", kLlmcHeaderBytes, llama3 ? 4 : 2};
  if (count <= 0)
    throw DataError("data file " + quoted(path) + " is empty: its llm.c header declares " + std::to_string(count) +
                    " tokens");
  const int64_t declared = int64_t{count} * layout.width;
  const int64_t present = size - kLlmcHeaderBytes;
  if (present < declared)
    throw DataError("data file " + quoted(path) + " is truncated: its llm.c header declares " + std::to_string(count) +
                    " tokens (" + std::to_string(declared) + " bytes) but only " + std::to_string(present) +
                    " bytes follow the header; re-create or re-download it");
  if (present > declared)
    throw DataError("data file " + quoted(path) + " has " + std::to_string(present - declared) + " bytes after the " +
                    std::to_string(count) +
                    " tokens its llm.c header declares; the header's count is wrong or the file is corrupt");
  return layout;
}

// Decides the layout from the requested format, the first bytes and the size (> 0).
Layout choose_layout(const std::string& path, const std::string& format, const unsigned char* head, int64_t size) {
  if (format == "text") return {"text bytes", 0, 1};
  const int32_t magic = size >= 4 ? le32(head) : 0;
  if (magic == kLlmcMagic || magic == kLlmcLlama3Magic) {
    if (size < kLlmcHeaderBytes)
      throw DataError("data file " + quoted(path) + " starts with llm.c's magic " + std::to_string(magic) +
                      " but is shorter (" + std::to_string(size) + " bytes) than llm.c's " +
                      std::to_string(kLlmcHeaderBytes) + "-byte header; re-create it");
    return llmc_layout(path, head, size);
  }
  if (format == "tokens" || ends_with(path, ".bin")) {
    if (size % 2 != 0)
      throw DataError("data file " + quoted(path) + " has an odd size (" + std::to_string(size) +
                      " bytes), so it is not nanoGPT's uint16 tokens and has no llm.c header; set data.format = "
                      "\"text\" to read it as bytes");
    return {"nanoGPT tokens", 0, 2};
  }
  return {"text bytes", 0, 1};
}

// Little-endian unsigned tokens of `width` bytes -> int32. Plain loops the compiler
// vectorizes; no per-token call.
void convert(const unsigned char* in, int64_t n, int width, int32_t* out) {
  if (width == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i];
  } else if (width == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[2 * i] | in[2 * i + 1] << 8;
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = le32(in + 4 * i);
  }
}

}  // namespace

TokenFile read_token_file(const std::string& path, const std::string& format) {
  if (format != "auto" && format != "tokens" && format != "text")
    throw DataError("unknown data format '" + format + "' for " + quoted(path) +
                    "; use \"auto\", \"tokens\", \"text\" or \"megatron\"");
  const Fd fd = open_for_reading(path);
  const int64_t size = fd.size();
  if (size == 0)
    throw DataError("data file " + quoted(path) + " is empty (0 bytes); point data.path at a non-empty file");

  // The first bytes decide the format; text and nanoGPT files have no header, so what was
  // read is already payload.
  unsigned char head[kLlmcHeaderBytes];
  const int64_t head_bytes = std::min(size, kLlmcHeaderBytes);
  fd.read_exact(head, head_bytes);
  const Layout layout = choose_layout(path, format, head, size);

  TokenFile file;
  file.format = layout.format;
  const int64_t count = (size - layout.header_bytes) / layout.width;
  file.tokens.resize(static_cast<size_t>(count));
  int32_t* out = file.tokens.data();
  // Payload bytes already in `head` (multiple of the width: 1024 is, and so is any even size).
  const int64_t in_head = head_bytes - layout.header_bytes;
  convert(head + layout.header_bytes, in_head / layout.width, layout.width, out);
  int64_t done = in_head / layout.width;

  std::vector<unsigned char> buffer(
      static_cast<size_t>(std::min(kChunkBytes, std::max<int64_t>(size - head_bytes, 1))));
  while (done < count) {
    const int64_t n = std::min<int64_t>(count - done, kChunkBytes / layout.width);
    fd.read_exact(buffer.data(), n * layout.width);
    convert(buffer.data(), n, layout.width, out + done);
    done += n;
  }
  if (layout.width == 4) {
    // uint32 ids above INT32_MAX wrapped negative in the conversion.
    const auto bad = std::find_if(file.tokens.begin(), file.tokens.end(), [](int32_t t) { return t < 0; });
    if (bad != file.tokens.end())
      throw DataError("data file " + quoted(path) + " has token id " + std::to_string(static_cast<uint32_t>(*bad)) +
                      " at position " + std::to_string(bad - file.tokens.begin()) + ", above 2^31-1");
  }
  return file;
}

void write_llmc_file(const std::string& path, const std::vector<int32_t>& tokens) {
  LlmcWriter writer(path, 65536);
  writer.add_document(tokens);
  writer.finish();
}

}  // namespace axonn
