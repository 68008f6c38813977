#pragma once
// A folder of this fuzz process for the files a target writes and reads back, in /dev/shm when
// there is one (no disk traffic at hundreds of thousands of inputs), removed at exit.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "fuzz_checks.hpp"

namespace axonn::fuzz {

class ScratchDir {
 public:
  // `name` goes into the folder's name: /dev/shm/axonn-fuzz-<name>-XXXXXX.
  explicit ScratchDir(const std::string& name) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : tmp ? tmp : "/tmp";
    std::string pattern = base + "/axonn-fuzz-" + name + "-XXXXXX";
    require(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace axonn::fuzz
