#pragma once
// One rank's stdout or stderr, copied to the launcher's as whole lines with a "[rank] "
// prefix, like `srun --label`, so lines of different ranks never mix.
#include <cstddef>
#include <string>

namespace axonn {

class LabelledOutput {
 public:
  // A line longer than this many bytes without a newline is written in pieces of this size.
  static constexpr size_t kMaxLine = size_t{1} << 16;

  LabelledOutput(int rank, int out_fd);
  // Writes every complete line of what arrived so far; keeps the rest for later.
  void feed(const char* data, size_t n);
  // Writes a last line that did not end with a newline, adding one (at the rank's exit).
  void finish();

 private:
  void emit(const char* line, size_t n, bool add_newline);
  std::string prefix_;
  int fd_;
  std::string pending_;
  std::string out_;  // reused buffer: prefixed lines written with one write()
};

// Writes all of `text` to `fd`, retrying short writes and EINTR. Gives up silently on
// other errors: a closed terminal must not stop the job.
void write_all(int fd, const std::string& text);

}  // namespace axonn
