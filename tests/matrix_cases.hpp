#pragma once
// The cases of a combination matrix (tests/combination_matrix.py writes them): one line per
// case, `name factor=level ...`; '#' lines are comments.
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace axonn::test {

struct MatrixCase {
  std::string name;
  std::map<std::string, std::string> level;  // factor -> level
};

inline std::vector<MatrixCase> read_matrix_cases(const std::string& path) {
  std::ifstream in(path);
  std::vector<MatrixCase> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    MatrixCase c;
    words >> c.name;
    for (std::string kv; words >> kv;) c.level[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    out.push_back(std::move(c));
  }
  return out;
}

// "case07: factor=level ..." for failure messages.
inline std::string describe(const MatrixCase& c) {
  std::string s = c.name + ":";
  for (const auto& [factor, level] : c.level) s += " " + factor + "=" + level;
  return s;
}

// gtest prints a failed case's parameter with this instead of its bytes.
inline void PrintTo(const MatrixCase& c, std::ostream* os) { *os << describe(c); }

}  // namespace axonn::test
