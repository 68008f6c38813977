#pragma once
// The PyTorch side of the GPU benchmarks (bench_train_gpu and its --fit, bench_ops_gpu --attention):
// a script of bench/ run by the Python that holds PyTorch with CUDA, and the JSON it prints
// last read back. Including targets define AXONN_SOURCE_DIR (the source tree, where the
// scripts are; $AXONN_SOURCE_DIR overrides it for a copied build, scripts/gpu_bundle.sh).
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "subprocess.hpp"

#ifndef AXONN_SOURCE_DIR
#error "AXONN_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif

namespace axonn::bench {

// The number after `"key": ` in `json` (its last occurrence), if there is one.
inline std::optional<double> json_number(const std::string& json, const std::string& key) {
  const size_t at = json.rfind("\"" + key + "\": ");
  if (at == std::string::npos) return std::nullopt;
  const char* p = json.c_str() + at + key.size() + 4;
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  if (end == p) return std::nullopt;
  return v;
}

// The shell command that runs bench/<script> with `args` under `python`, stderr into stdout.
// In a bundle (scripts/gpu_bundle.sh) LD_LIBRARY_PATH starts with the bundle's copies of
// Debian's libraries; PyTorch gets the path as it was before env.sh.
inline std::string torch_command(const std::string& python, const std::string& script, const std::string& args) {
  const char* source = std::getenv("AXONN_SOURCE_DIR");
  const std::string path =
      std::string(source != nullptr && *source != '\0' ? source : AXONN_SOURCE_DIR) + "/bench/" + script;
  const char* python_path = std::getenv("AXONN_PYTHON_LD_LIBRARY_PATH");
  const std::string env = python_path != nullptr ? "env LD_LIBRARY_PATH='" + std::string(python_path) + "' " : "";
  return env + python + " " + path + args + " 2>&1";
}

// Runs `command` (torch_command's) and returns its output; throws, with the command and its
// output, when it fails or prints no `"required_key": <number>`. `skip` names the option
// that leaves the PyTorch side out.
inline std::string run_torch_side(const std::string& command, const std::string& required_key,
                                  const std::string& skip = "--no-torch") {
  int status = 0;
  const std::string output = run_capture(command, status);
  if (status != 0 || !json_number(output, required_key))
    throw std::runtime_error("PyTorch side failed (" + command + "); " + skip + " skips it:\n" + output);
  return output;
}

}  // namespace axonn::bench
