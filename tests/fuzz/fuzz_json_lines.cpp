// libFuzzer target for `axonn data prepare`'s document reader (runner/prepare/documents.hpp)
// on a JSON Lines file: one object a line, the document in its "text" member.
//
// The first input byte picks the batch size (1 byte to 1 MiB of text); the rest is the file,
// written to a scratch folder (in /dev/shm when there is one) and read to the end. Beyond ASan
// and UBSan: reading ends or throws DataError (anything else escapes and aborts); a DataError
// names the file and the line ("file:N:") in one printable line; no more documents come back
// than the file has lines; and every input byte is counted once the file is read.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_checks.hpp"
#include "fuzz_scratch_dir.hpp"
#include "runner/prepare/documents.hpp"
#include "trainer/data/token_data.hpp"

using axonn::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const axonn::fuzz::ScratchDir scratch("jsonl");
  if (size == 0) return 0;
  const int64_t batch_bytes = int64_t{1} << (data[0] % 21);
  const std::string path = scratch.path() + "/docs.jsonl";
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    require(static_cast<bool>(out));
  }
  const auto lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  axonn::DocumentReader reader(axonn::list_inputs({path}), "text");
  size_t documents = 0;
  try {
    std::vector<std::string> batch;
    while (reader.next_batch(batch, batch_bytes)) documents += batch.size();
  } catch (const axonn::DataError& e) {
    const std::string m = e.what();
    axonn::fuzz::require_printable_line(m, 4096);
    require(m.rfind(path + ":", 0) == 0, m);
    return 0;
  }
  require(documents <= lines);
  // The reader counts a newline after the last line even when the file has none.
  require(reader.bytes_read() == static_cast<int64_t>(text.size()) ||
          reader.bytes_read() == static_cast<int64_t>(text.size()) + 1);
  return 0;
}
