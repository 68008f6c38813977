#include "runner/prepare/progress_line.hpp"

#include <cstdio>

namespace axonn {
namespace {

// 1234567 -> "1,234,567"
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  const int first = static_cast<int>(digits.size()) % 3;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (static_cast<int>(i) - first) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// 3456789 -> "3.46M", 45678 -> "45.7k"; below 10,000 the plain count.
std::string short_count(int64_t n) {
  char text[32];
  if (n < 10000) return std::to_string(n);
  if (n < 1000000) std::snprintf(text, sizeof text, "%.1fk", static_cast<double>(n) / 1e3);
  else if (n < 1000000000) std::snprintf(text, sizeof text, "%.2fM", static_cast<double>(n) / 1e6);
  else std::snprintf(text, sizeof text, "%.2fG", static_cast<double>(n) / 1e9);
  return text;
}

std::string clock_time(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

}  // namespace

std::string format_progress(const PrepareProgress& p) {
  std::string s = with_commas(p.documents);
  s.append(" documents, ").append(short_count(p.tokens)).append(" tokens");
  if (p.seconds > 0) {
    char rate[48];
    std::snprintf(rate, sizeof rate, ", %.1f MB/s", static_cast<double>(p.bytes_read) / 1e6 / p.seconds);
    s.append(rate);
  }
  if (p.bytes_total > 0) {
    char percent[16];
    std::snprintf(percent, sizeof percent, ", %d%%",
                  static_cast<int>(100.0 * static_cast<double>(p.bytes_read) / static_cast<double>(p.bytes_total)));
    s.append(percent);
    if (p.bytes_read > 0 && p.seconds > 0 && p.bytes_read < p.bytes_total) {
      const double left = p.seconds * static_cast<double>(p.bytes_total - p.bytes_read) / static_cast<double>(p.bytes_read);
      s.append(", ETA ").append(clock_time(left));
    }
  }
  return s;
}

void ProgressLine::show(const PrepareProgress& p) {
  const double every = terminal_ ? 0.25 : 30.0;
  if (p.seconds - last_seconds_ < every) return;
  last_seconds_ = p.seconds;
  const std::string line = format_progress(p);
  if (terminal_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void ProgressLine::done() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace axonn
