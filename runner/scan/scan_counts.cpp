#include "runner/scan/scan_counts.hpp"

#include <charconv>
#include <cstdint>

#include "runner/cli/args.hpp"

namespace axonn {
namespace {

const char* const kForms =
    "give A:B (GPU counts doubling from A to B, e.g. 8:512) or a list in increasing order "
    "(e.g. 8,64,512)";

[[noreturn]] void bad(const std::string& text, const std::string& what) {
  throw UsageError("--scan '" + text + "': " + what);
}

int count_of(const std::string& text, const std::string& word, int max_gpus) {
  if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos)
    bad(text, "'" + word + "' is not a GPU count (a whole number from 1); " + kForms);
  long long v = 0;
  const std::from_chars_result parsed = std::from_chars(word.data(), word.data() + word.size(), v);
  if (parsed.ec == std::errc::result_out_of_range || v > max_gpus)
    bad(text, word + " GPUs is more than the " + std::to_string(max_gpus) + " the chooser handles; scan fewer GPUs");
  if (v == 0) bad(text, "0 GPUs cannot train; counts start at 1");
  return static_cast<int>(v);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> words;
  size_t begin = 0;
  for (size_t end; (end = text.find(separator, begin)) != std::string::npos; begin = end + 1)
    words.push_back(text.substr(begin, end - begin));
  words.push_back(text.substr(begin));
  return words;
}

// Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict on "," + a temporary.
std::string join(const std::vector<int>& counts) {
  std::string s;
  for (int c : counts) {
    if (!s.empty()) s += ',';
    s += std::to_string(c);
  }
  return s;
}

std::vector<int> doubling(const std::string& text, int max_gpus) {
  const std::vector<std::string> ends = split(text, ':');
  if (ends.size() != 2) bad(text, "a range has one ':'; " + std::string(kForms));
  const int first = count_of(text, ends[0], max_gpus), last = count_of(text, ends[1], max_gpus);
  if (first > last)
    bad(text, "the range starts above its end (" + ends[0] + " > " + ends[1] +
                  "); write it smallest first: " + ends[1] + ":" + ends[0]);
  // first, 2 first, 4 first, ... while not above last (<= max_gpus, so no overflow).
  std::vector<int> counts = {first};
  while (int64_t{counts.back()} * 2 <= last) counts.push_back(counts.back() * 2);
  if (counts.back() != last) {
    // last falls between two doublings: name both ends it could be, and the list that ends at it.
    const int64_t above = int64_t{counts.back()} * 2;
    std::vector<int> listed = counts;
    listed.push_back(last);
    bad(text, std::to_string(last) + " is not " + std::to_string(first) +
                  " doubled a whole number of times; end the range at " + std::to_string(counts.back()) +
                  (above <= max_gpus ? " or " + std::to_string(above) : "") + ", or list the counts: --scan " +
                  join(listed));
  }
  return counts;
}

}  // namespace

std::vector<int> parse_scan_counts(const std::string& text, int max_gpus) {
  if (text.empty()) bad(text, "no GPU counts; " + std::string(kForms));
  std::vector<int> counts;
  if (text.find(':') != std::string::npos) {
    if (text.find(',') != std::string::npos) bad(text, "a range or a list, not both; " + std::string(kForms));
    counts = doubling(text, max_gpus);
  } else {
    for (const std::string& word : split(text, ',')) {
      const int count = count_of(text, word, max_gpus);
      if (!counts.empty() && count <= counts.back())
        bad(text, "counts must increase, and " + word + " comes after " + std::to_string(counts.back()) +
                      "; list them smallest first, each once");
      counts.push_back(count);
    }
  }
  if (counts.size() > kMaxScanCounts)
    bad(text, std::to_string(counts.size()) + " counts are more than the " + std::to_string(kMaxScanCounts) +
                  " one scan prices; scan fewer");
  return counts;
}

void require_whole_nodes(const std::vector<int>& counts, int gpus_per_node, const std::string& per_node_from) {
  for (int count : counts)
    if (count % gpus_per_node != 0)
      throw UsageError("--scan: " + std::to_string(count) + " GPUs is not a whole number of nodes of " +
                       std::to_string(gpus_per_node) + " GPUs (" + per_node_from + "); scan multiples of " +
                       std::to_string(gpus_per_node) + ", or give --gpus-per-node G with G dividing every count");
}

}  // namespace axonn
