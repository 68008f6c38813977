// The folders are layers: a file may include its own folder and the folders below it, never
// one above (docs/architecture.md). The build alone does not catch an upward include when the
// include path happens to reach it, so this test reads every source file's `#include "x/..."`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "process_helpers.hpp"

namespace fs = std::filesystem;

namespace {

// Each layer folder and the folders its files may include (besides its own). Every include
// is written from the repository root, so its first path component names the folder.
const std::map<std::string, std::set<std::string>> kMayInclude = {
    {"core", {}},
    {"layout", {"core"}},
    {"checkpoint", {"core"}},
    {"config", {"core", "layout"}},
    {"comm", {"core", "layout"}},
    {"trainer", {"core", "layout", "checkpoint", "config", "comm"}},
    {"plugins", {"core", "layout", "config"}},
    {"runner", {"core", "layout", "checkpoint", "config", "comm", "trainer"}},
};

// Top-level folders that hold no layer: tests, benchmarks and non-C++ material may use anything.
const std::set<std::string> kNotLayers = {"tests", "bench", "docs", "cmake", "scripts", "site_configs", "job_templates"};

bool is_source(const fs::path& p) {
  static const std::set<std::string> kExtensions = {".cpp", ".hpp", ".cu", ".cuh", ".in"};
  return kExtensions.count(p.extension().string()) > 0;
}

// The layer folder a quoted include's first component names, or "" for a file of the same folder.
std::string included_layer(const std::string& include) {
  const auto slash = include.find('/');
  return slash == std::string::npos ? "" : include.substr(0, slash);
}

// One line per violation: "trainer/x.cpp:12 includes runner/cli/args.hpp (runner is not below trainer)",
// and one per top-level folder with C++ sources that the table does not place.
std::vector<std::string> layer_violations(const fs::path& root) {
  std::vector<std::string> found;
  const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  for (const auto& top : fs::directory_iterator(root)) {
    const std::string folder = top.path().filename().string();
    if (!top.is_directory() || folder.starts_with(".") || kNotLayers.count(folder)) continue;
    if (fs::exists(top.path() / "CMakeCache.txt")) continue;  // a build folder
    const auto allowed = kMayInclude.find(folder);
    for (const auto& entry : fs::recursive_directory_iterator(top.path())) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string file = fs::relative(entry.path(), root).string();
      if (allowed == kMayInclude.end()) {
        found.push_back(folder + "/ holds C++ sources (" + file + ") but no layer: add it to kMayInclude");
        break;
      }
      std::ifstream in(entry.path());
      std::string line;
      for (int number = 1; std::getline(in, line); ++number) {
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        const std::string layer = included_layer(m[1]);
        if (layer.empty() || layer == folder || allowed->second.count(layer)) continue;
        const bool known = kMayInclude.count(layer) > 0;
        if (!known && !fs::exists(root / layer)) continue;  // a library's own folder, e.g. "gloo/..."
        found.push_back(file + ":" + std::to_string(number) + " includes " + m[1].str() + " (" + layer +
                        (known ? " is not below " : " is no layer, so not below ") + folder + ")");
      }
    }
  }
  return found;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

fs::path scratch_tree() {
  const fs::path dir = fs::temp_directory_path() / ("axonn-layers-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST(Layers, NoFileIncludesAFolderAboveItsLayer) {
  const auto violations = layer_violations(axonn::test::kSourceDir);
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(Layers, ATrainerFileIncludingTheCliIsFound) {
  const fs::path root = scratch_tree();
  write_file(root / "trainer/train/step.cpp",
             "#include \"trainer/train/step.hpp\"\n#include <vector>\n#include \"layout/layout.hpp\"\n"
             "  #include \"runner/cli/args.hpp\"\n");
  write_file(root / "layout/layout.hpp", "#pragma once\n#include \"comm/communicator.hpp\"\n");
  write_file(root / "comm/communicator.hpp", "#pragma once\n");
  write_file(root / "tests/test_x.cpp", "#include \"runner/cli/args.hpp\"\n");
  write_file(root / "runner/cli/args.hpp", "#pragma once\n");
  const auto violations = layer_violations(root);
  std::set<std::string> got(violations.begin(), violations.end());
  EXPECT_EQ(got, (std::set<std::string>{"layout/layout.hpp:2 includes comm/communicator.hpp (comm is not below layout)",
                                        "trainer/train/step.cpp:4 includes runner/cli/args.hpp (runner is not below trainer)"}));
  fs::remove_all(root);
}

TEST(Layers, AFolderOfSourcesWithNoLayerIsFound) {
  const fs::path root = scratch_tree();
  write_file(root / "moe/router.cpp", "#include \"layout/layout.hpp\"\n");
  write_file(root / "layout/layout.hpp", "#pragma once\n");
  EXPECT_EQ(layer_violations(root),
            std::vector<std::string>{"moe/ holds C++ sources (moe/router.cpp) but no layer: add it to kMayInclude"});
  fs::remove_all(root);
}
