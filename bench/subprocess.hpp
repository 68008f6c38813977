#pragma once
// A benchmark's child commands: run one through the shell and keep what it printed, and
// read the files it wrote.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace axonn::bench {

// Runs `command` (its stderr should be redirected into stdout) and returns what it printed;
// `status` gets pclose's status. std::runtime_error when it cannot be started.
inline std::string run_capture(const std::string& command, int& status) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot start: " + command);
  std::string output;
  char buf[4096];
  for (size_t got; (got = fread(buf, 1, sizeof buf, pipe)) > 0;) output.append(buf, got);
  status = pclose(pipe);
  return output;
}

// The whole file, or "" when it cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace axonn::bench
