#include "runner/pmix/labelled_output.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace axonn {

LabelledOutput::LabelledOutput(int rank, int out_fd) : prefix_(fmt::format("[{}] ", rank)), fd_(out_fd) {}

void LabelledOutput::feed(const char* data, size_t n) {
  out_.clear();
  while (n > 0) {
    const void* nl = std::memchr(data, '\n', n);
    if (!nl) {
      pending_.append(data, n);
      break;
    }
    const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - data) + 1;
    if (pending_.empty()) {
      emit(data, len, false);
    } else {
      pending_.append(data, len);
      emit(pending_.data(), pending_.size(), false);
      pending_.clear();
    }
    data += len;
    n -= len;
  }
  while (pending_.size() >= kMaxLine) {  // a huge line without newlines: bound the memory
    emit(pending_.data(), kMaxLine, true);
    pending_.erase(0, kMaxLine);
  }
  write_all(fd_, out_);
}

void LabelledOutput::finish() {
  out_.clear();
  if (!pending_.empty()) emit(pending_.data(), pending_.size(), true);
  pending_.clear();
  write_all(fd_, out_);
}

void LabelledOutput::emit(const char* line, size_t n, bool add_newline) {
  out_ += prefix_;
  out_.append(line, n);
  if (add_newline) out_ += '\n';
}

void write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t w = write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += static_cast<size_t>(w);
  }
}

}  // namespace axonn
