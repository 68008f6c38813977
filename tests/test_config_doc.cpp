// docs/configuration.md against the loaders: every table of the page lists exactly the keys
// its loader accepts, and every table the loaders read has a table on the page. The loaders
// name a table's valid keys when they meet an unknown one (TomlReader::finish), so each table
// is probed with a bogus key and the list in the error is compared with the page's rows.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config_error.hpp"
#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "layout/collective.hpp"

namespace axonn {
namespace {

const std::string kPage = std::string(AXONN_SOURCE_DIR) + "/docs/configuration.md";
const std::string kPageName = "docs/configuration.md";
const std::string kBogus = "zzz_not_a_key";

enum class Loader { job, site };

// One table of the page: the paths its "###" heading names in backticks
// ("network.<tier>.groups[]"), and its rows' keys with their type column.
struct PageTable {
  Loader loader = Loader::job;
  int line = 0;  // the heading's
  std::vector<std::string> paths;
  std::vector<std::string> keys;
  std::map<std::string, std::string> types;
};

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The texts between pairs of backticks.
std::vector<std::string> backticked(const std::string& s) {
  std::vector<std::string> out;
  for (size_t open = s.find('`'); open != std::string::npos; open = s.find('`', open + 1)) {
    const size_t close = s.find('`', open + 1);
    if (close == std::string::npos) break;
    out.push_back(s.substr(open + 1, close - open - 1));
    open = close;
  }
  return out;
}

// The page's tables: "## Job ..." and "## Site ..." say whose keys follow, each "###" heading
// with backticked paths starts a table, each row "| `key` | type | ..." is one of its keys.
std::vector<PageTable> page_tables(std::vector<std::string>& problems) {
  std::ifstream in(kPage);
  if (!in) {
    problems.push_back(kPage + ": cannot be read");
    return {};
  }
  std::vector<PageTable> tables;
  std::optional<Loader> loader;
  bool in_table = false;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.rfind("## ", 0) == 0) {
      loader = text.rfind("## Job", 0) == 0    ? std::optional<Loader>(Loader::job)
               : text.rfind("## Site", 0) == 0 ? std::optional<Loader>(Loader::site)
                                               : std::nullopt;
      in_table = false;
    } else if (text.rfind("### ", 0) == 0) {
      in_table = loader.has_value() && !backticked(text).empty();
      if (in_table) tables.push_back({*loader, line, backticked(text), {}, {}});
    } else if (in_table && text.rfind("| `", 0) == 0) {
      const std::string key = backticked(text).front();
      const size_t type_start = text.find('|', 1) + 1;
      const std::string type = trimmed(text.substr(type_start, text.find('|', type_start) - type_start));
      PageTable& table = tables.back();
      if (table.types.count(key))
        problems.push_back(kPageName + ":" + std::to_string(line) + ": `" + key + "` is listed twice in its table");
      table.keys.push_back(key);
      table.types[key] = type;
    }
  }
  return tables;
}

// How a page path's placeholders expand: the loader's own lists, so a new tier or kind
// needs no change here.
std::map<std::string, std::vector<std::string>> placeholders() {
  std::vector<std::string> tiers, kinds;
  for (const SiteTier& tier : kSiteTiers) tiers.emplace_back(tier.key);
  for (const CollectiveKind kind : kCalibratedKinds) kinds.emplace_back(collective_name(kind));
  return {{"<tier>", tiers}, {"<kind>", kinds}};
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

using Binding = std::map<std::string, std::string>;

std::string bound(std::string text, const Binding& binding) {
  for (const auto& [name, value] : binding) text = replaced(text, name, value);
  return text;
}

// Every assignment of values to the placeholders `path` holds.
std::vector<Binding> bindings(const std::string& path) {
  std::vector<Binding> out = {{}};
  for (const auto& [name, values] : placeholders()) {
    if (path.find(name) == std::string::npos) continue;
    std::vector<Binding> wider;
    for (const Binding& b : out)
      for (const std::string& value : values) {
        Binding more = b;
        more[name] = value;
        wider.push_back(more);
      }
    out = wider;
  }
  return out;
}

// A TOML file whose probed table holds zzz_not_a_key, by page path; the rest of each file is
// what the loader needs to reach that table's check of unknown keys: the keys an entry
// requires, [calibration]'s date, the group a residual entry refers to. Keys a loader reads
// only when given (measured_ranks and measured of a fit) are given, so that its list of valid
// keys names them.
struct Probe {
  Loader loader;
  std::string toml;
};

const std::string kFit = "latency_us = 1, bandwidth_GBps = 1, measured_ranks = 2";
const std::string kGroup = "[[network.<tier>.groups]]\nranks = 2\n";
const std::string kCalibration = "[calibration]\ndate = \"2026-01-01T00:00:00Z\"\n";

const std::map<std::string, Probe> kProbes = {
    {"model", {Loader::job, "[model]\nzzz_not_a_key = 1\n"}},
    {"model.rope_scaling",
     {Loader::job, "[model]\npositions = \"rope\"\n[model.rope_scaling]\nzzz_not_a_key = 1\n"}},
    {"training", {Loader::job, "[training]\nzzz_not_a_key = 1\n"}},
    {"data", {Loader::job, "[data]\nzzz_not_a_key = 1\n"}},
    {"data.sources[]", {Loader::job, "[[data.sources]]\npath = \"x\"\nzzz_not_a_key = 1\n"}},
    {"checkpoint", {Loader::job, "[checkpoint]\nzzz_not_a_key = 1\n"}},
    {"run", {Loader::job, "[run]\nzzz_not_a_key = 1\n"}},
    {"site", {Loader::site, "[site]\nzzz_not_a_key = 1\n"}},
    {"node", {Loader::site, "[node]\nzzz_not_a_key = 1\n"}},
    {"compute", {Loader::site, "[compute]\nzzz_not_a_key = 1\n"}},
    {"compute.gemm[]", {Loader::site, "[[compute.gemm]]\nm = 1\nk = 1\nn = 1\ntflops = 1\nzzz_not_a_key = 1\n"}},
    {"network", {Loader::site, "[network]\nzzz_not_a_key = 1\n"}},
    {"network.<tier>", {Loader::site, "[network.<tier>]\nzzz_not_a_key = 1\n"}},
    {"network.<tier>.<kind>",
     {Loader::site,
      "[network.<tier>]\n<kind> = { " + kFit + ", measured = [{ bytes = 1, us = 1 }], zzz_not_a_key = 1 }\n"}},
    {"network.<tier>.<kind>.measured[]",
     {Loader::site,
      "[network.<tier>]\n<kind> = { " + kFit + ", measured = [{ bytes = 1, us = 1, zzz_not_a_key = 1 }] }\n"}},
    {"network.<tier>.overlap[]",
     {Loader::site, "[network.<tier>]\noverlap = [{ bytes = 1, fraction = 0.5, zzz_not_a_key = 1 }]\n"}},
    {"network.<tier>.groups[]", {Loader::site, kGroup + "zzz_not_a_key = 1\n"}},
    {"network.<tier>.groups[].<kind>",
     {Loader::site, kGroup + "<kind> = { " + kFit + ", measured = [{ bytes = 1, us = 1 }], zzz_not_a_key = 1 }\n"}},
    {"network.<tier>.groups[].<kind>.measured[]",
     {Loader::site, kGroup + "<kind> = { " + kFit + ", measured = [{ bytes = 1, us = 1, zzz_not_a_key = 1 }] }\n"}},
    {"network.<tier>.groups[].overlap[]",
     {Loader::site, kGroup + "overlap = [{ bytes = 1, fraction = 0.5, zzz_not_a_key = 1 }]\n"}},
    {"policy", {Loader::site, "[policy]\nzzz_not_a_key = 1\n"}},
    {"cost", {Loader::site, "[cost]\nzzz_not_a_key = 1\n"}},
    {"calibration", {Loader::site, kCalibration + "zzz_not_a_key = 1\n"}},
    {"calibration.residual", {Loader::site, kCalibration + "[calibration.residual]\nzzz_not_a_key = 1\n"}},
    {"calibration.residual.<tier>",
     {Loader::site, kCalibration + "[calibration.residual.<tier>]\nzzz_not_a_key = 1\n"}},
    {"calibration.residual.<tier>.groups[]",
     {Loader::site, kGroup + kCalibration + "[[calibration.residual.<tier>.groups]]\nranks = 2\nzzz_not_a_key = 1\n"}},
};

std::string load_error(Loader loader, const std::string& toml) {
  try {
    if (loader == Loader::job)
      load_job_config_string(toml, "probe.toml", SiteConfig{});
    else
      load_site_config_string(toml, "probe.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// The keys the loader accepts in the table at `prefix` ("network.intra_node.groups[0]"; empty:
// the root), from its error about zzz_not_a_key there: "...unknown key
// '<prefix>.zzz_not_a_key' ...; valid keys in [<prefix>]: a, b, c". Throws std::runtime_error
// with the message when the error is about something else.
std::set<std::string> accepted_keys(Loader loader, const std::string& toml, const std::string& prefix) {
  const std::string message = load_error(loader, toml);
  const std::string unknown = "unknown key '" + (prefix.empty() ? kBogus : prefix + "." + kBogus) + "'";
  const std::string list = prefix.empty() ? "; valid keys: " : "; valid keys in [" + prefix + "]: ";
  const size_t at = message.find(list);
  if (message.find(unknown) == std::string::npos || at == std::string::npos)
    throw std::runtime_error("the probe of [" + prefix + "] did not fail on " + kBogus +
                             "; the loader said: " + message + "\nprobe:\n" + toml);
  std::set<std::string> keys;
  const std::string rest = message.substr(at + list.size());
  if (rest == "(none)") return keys;
  for (size_t start = 0;;) {
    const size_t comma = rest.find(", ", start);
    keys.insert(rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 2;
  }
  return keys;
}

std::string joined(const std::set<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

std::string where(const PageTable& table) { return kPageName + ":" + std::to_string(table.line); }

class ConfigDoc : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> problems;
    tables_ = page_tables(problems);
    for (const auto& p : problems) ADD_FAILURE() << p;
    ASSERT_FALSE(tables_.empty()) << kPage << " has no tables under \"## Job\" or \"## Site\" headings";
  }
  std::vector<PageTable> tables_;
};

// The heart of the check: per page table and each path it names, with its placeholders
// bound, the loader's valid keys against the page's rows, both ways.
TEST_F(ConfigDoc, EveryTableListsExactlyTheKeysItsLoaderAccepts) {
  // One failure per page path and difference, naming the bound paths it was seen at.
  std::map<std::string, std::vector<std::string>> differences;
  for (const PageTable& table : tables_) {
    const std::set<std::string> page(table.keys.begin(), table.keys.end());
    for (const std::string& path : table.paths) {
      const auto probe = kProbes.find(path);
      if (probe == kProbes.end()) {
        ADD_FAILURE() << where(table) << ": `" << path
                      << "` is no table this test knows how to probe; add its probe to kProbes in "
                         "tests/test_config_doc.cpp";
        continue;
      }
      if (probe->second.loader != table.loader) {
        ADD_FAILURE() << where(table) << ": `" << path << "` is under the wrong \"##\" heading (job vs site)";
        continue;
      }
      for (const Binding& b : bindings(path)) {
        const std::string prefix = replaced(bound(path, b), "[]", "[0]");
        std::set<std::string> loader;
        try {
          loader = accepted_keys(table.loader, bound(probe->second.toml, b), prefix);
        } catch (const std::runtime_error& e) {
          ADD_FAILURE() << where(table) << ": " << e.what();
          continue;
        }
        std::set<std::string> missing, extra;
        for (const auto& k : loader)
          if (!page.count(k)) missing.insert(k);
        for (const auto& k : page)
          if (!loader.count(k)) extra.insert(k);
        std::string what;
        if (!missing.empty()) what += "\n  the loader accepts keys the page does not list: " + joined(missing);
        if (!extra.empty()) what += "\n  the page lists keys the loader does not accept: " + joined(extra);
        if (!what.empty()) differences[where(table) + ": `" + path + "`" + what].push_back(prefix);
      }
    }
  }
  for (const auto& [what, prefixes] : differences) {
    std::string at;
    for (const auto& p : prefixes) at += (at.empty() ? "" : ", ") + p;
    ADD_FAILURE() << what << "\n  (seen at [" << at << "])";
  }
}

// The other way round: every table the test probes (all the loaders read) has a page table,
// each loader's top-level sections are the page's, and every key the page types as a table
// has a table of its own, so a new nested table cannot go undocumented.
TEST_F(ConfigDoc, EveryTableTheLoadersReadHasAPageTable) {
  std::set<std::string> page_paths, concrete;
  std::map<Loader, std::set<std::string>> sections;
  for (const PageTable& table : tables_)
    for (const std::string& path : table.paths) {
      page_paths.insert(path);
      for (const Binding& b : bindings(path)) concrete.insert(bound(path, b));
      if (path.find('.') == std::string::npos) sections[table.loader].insert(path);
    }
  for (const auto& [path, probe] : kProbes)
    EXPECT_TRUE(page_paths.count(path)) << kPageName << " has no table for `" << path << "`, which the "
                                        << (probe.loader == Loader::job ? "job" : "site")
                                        << " loader reads; add a \"### `" << path << "`\" heading and its rows";

  for (const Loader loader : {Loader::job, Loader::site}) {
    const char* name = loader == Loader::job ? "job" : "site";
    const std::set<std::string> root = accepted_keys(loader, "zzz_not_a_key = 1\n", "");
    EXPECT_EQ(joined(root), joined(sections[loader]))
        << "the " << name << " loader's top-level tables (left) against the page's \"## "
        << (loader == Loader::job ? "Job" : "Site") << "\" tables (right)";
  }

  for (const PageTable& table : tables_)
    for (const std::string& path : table.paths)
      for (const Binding& b : bindings(path))
        for (const std::string& key : table.keys) {
          if (table.types.at(key).find("table") == std::string::npos) continue;
          const std::string child = bound(path, b) + "." + key;
          EXPECT_TRUE(concrete.count(child) || concrete.count(child + "[]"))
              << where(table) << ": `" << key << "` in `" << path << "` is a table, but the page has no table for `"
              << child << "` or `" << child << "[]`";
        }
}

}  // namespace
}  // namespace axonn
