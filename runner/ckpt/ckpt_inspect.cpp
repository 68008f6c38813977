// axonn ckpt inspect DIR [--step N] [--fallback] [--json]
// What a committed step holds: step, the layout that wrote it, model config, data cursor,
// metadata; the parameters with their AdamW moments side by side (one row per parameter:
// "adam.m/<name>" and "adam.v/<name>" are its rectangle counts), any other tensor, and the
// shard files. --json prints every tensor under its full name, and every value whole.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "runner/cli/args.hpp"
#include "runner/ckpt/ckpt.hpp"
#include "runner/ckpt/ckpt_format.hpp"
#include "runner/ckpt/ckpt_open.hpp"
#include "core/exit_codes.hpp"
#include "layout/layout.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

const char* const kMomentPrefixes[] = {"adam.m/", "adam.v/"};

// "parameter", "adam.m" or "adam.v" by name prefix.
std::string tensor_group(const std::string& name) {
  for (const char* p : kMomentPrefixes)
    if (name.rfind(p, 0) == 0) return std::string(p, 6);
  return "parameter";
}

// The parameter table's rows and the tensors it does not show (moments without their
// parameter, or of another shape).
struct Grouping {
  std::vector<const TensorInfo*> params;
  std::map<std::string, const TensorInfo*> moments;  // full name -> tensor, shown beside its parameter
  std::vector<const TensorInfo*> others;
  int64_t param_bytes = 0, moment_bytes = 0;
};

Grouping group_tensors(const std::vector<TensorInfo>& tensors) {
  std::map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& t : tensors) by_name[t.name] = &t;
  Grouping g;
  for (const TensorInfo& t : tensors) {
    if (tensor_group(t.name) != "parameter") continue;
    g.params.push_back(&t);
    g.param_bytes += t.bytes();
    for (const char* p : kMomentPrefixes) {
      const auto it = by_name.find(p + t.name);
      if (it == by_name.end() || it->second->global_shape != t.global_shape) continue;
      g.moments[it->first] = it->second;
      g.moment_bytes += t.bytes();
    }
  }
  for (const TensorInfo& t : tensors)
    if (tensor_group(t.name) != "parameter" && !g.moments.count(t.name)) g.others.push_back(&t);
  return g;
}

int64_t file_bytes(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? -1 : static_cast<int64_t>(size);
}

// The first line of a (possibly multi-line) string value, and how much more there is.
std::string first_line(const std::string& text) {
  const size_t nl = text.find('\n');
  const std::string_view first = std::string_view(text).substr(0, nl);
  if (nl == std::string::npos || nl + 1 == text.size()) return fmt::format("'{}'", first);
  const auto lines = std::count(text.begin(), text.end(), '\n') + (text.back() == '\n' ? 0 : 1);
  return fmt::format("'{}' (+ {} more lines, {} bytes; --json has it whole)", first, lines - 1, text.size());
}

std::string layout_text(const std::string& layout) {
  if (layout.empty()) return "(not recorded)";
  try {
    return layout + " (" + ranks_text(parse_layout(layout).world()) + ")";
  } catch (const LayoutError&) {
    return "'" + layout + "'";
  }
}

std::string inspect_text(const CheckpointReader& reader) {
  const Metadata& m = reader.metadata();
  std::string out = "checkpoint   " + reader.step_dir().string() + "\n";
  out += "step         " + std::to_string(reader.step()) + " (format " + format::kMagic + " v" +
         std::to_string(reader.format_version()) + ", checksums " + format::kChecksumAlgorithm + ")\n";
  out += "layout       " + layout_text(m.layout) + ", the layout that wrote it\n";
  out += "model        " + (m.model_config.empty() ? std::string("(not recorded)") : m.model_config) + "\n";
  out += "data cursor  " + std::to_string(m.data_cursor) + " (global index of the next training sample)\n";
  out += "rng state    " + std::to_string(m.rng_state.size()) + " bytes\n";
  std::vector<std::string> meta;
  for (const auto& [k, v] : m.ints) meta.push_back("int  " + k + " = " + std::to_string(v));
  for (const auto& [k, v] : m.reals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    meta.push_back("real " + k + " = " + buf);
  }
  for (const auto& [k, v] : m.strings) meta.push_back("str  " + k + " = " + first_line(v));
  if (meta.empty()) meta.push_back("(none)");
  for (size_t i = 0; i < meta.size(); ++i) out += (i == 0 ? "metadata     " : "             ") + meta[i] + "\n";

  const Grouping g = group_tensors(reader.tensors());
  size_t width = 4;
  for (const TensorInfo* t : g.params) width = std::max(width, t->name.size());
  for (const TensorInfo* t : g.others) width = std::max(width, t->name.size());
  const int w = static_cast<int>(width);
  char line[512];
  out += "\nparameters   " + std::to_string(g.params.size()) + " tensors, " + human_bytes(g.param_bytes) +
         " float32; AdamW moments beside them: " + std::to_string(g.moments.size()) + " tensors, " +
         human_bytes(g.moment_bytes) + "\n";
  std::snprintf(line, sizeof line, "  %-*s  %-16s  %10s  %5s  %6s  %6s\n", w, "name", "shape", "size", "rects",
                "adam.m", "adam.v");
  out += line;
  for (const TensorInfo* t : g.params) {
    std::string counts[2];
    for (int i = 0; i < 2; ++i) {
      const auto it = g.moments.find(kMomentPrefixes[i] + t->name);
      counts[i] = it == g.moments.end() ? "-" : std::to_string(it->second->sources.size());
    }
    std::snprintf(line, sizeof line, "  %-*s  %-16s  %10s  %5zu  %6s  %6s\n", w, t->name.c_str(),
                  shape_string(t->global_shape).c_str(), human_bytes(t->bytes()).c_str(), t->sources.size(),
                  counts[0].c_str(), counts[1].c_str());
    out += line;
  }
  if (!g.others.empty()) {
    out += "other        " + std::to_string(g.others.size()) + " tensors (moments without their parameter)\n";
    for (const TensorInfo* t : g.others) {
      std::snprintf(line, sizeof line, "  %-*s  %-16s  %10s  %5zu\n", w, t->name.c_str(),
                    shape_string(t->global_shape).c_str(), human_bytes(t->bytes()).c_str(), t->sources.size());
      out += line;
    }
  }

  int64_t payload = 0, on_disk = 0;
  std::string rows;
  for (const ShardInfo& s : reader.shards()) {
    const int64_t size = file_bytes(reader.step_dir() / s.file);
    payload += s.data_bytes;
    on_disk += std::max<int64_t>(size, 0);
    std::snprintf(line, sizeof line, "  %-16s  %5d  %8lld  %10s  %10s  %s\n", s.file.c_str(), s.rank,
                  static_cast<long long>(s.datasets), human_bytes(s.data_bytes).c_str(),
                  size < 0 ? "MISSING" : human_bytes(size).c_str(), hex64(s.checksum).c_str());
    rows += line;
  }
  out += "\nshards       " + std::to_string(reader.shards().size()) + " files, " + human_bytes(payload) + " payload, " +
         human_bytes(on_disk) + " on disk\n";
  std::snprintf(line, sizeof line, "  %-16s  %5s  %8s  %10s  %10s  %s\n", "file", "rank", "datasets", "payload",
                "file size", "xxh3 (index)");
  return out + line + rows;
}

toml::array ints_json(const std::vector<int64_t>& v) {
  toml::array a;
  for (int64_t x : v) a.push_back(x);
  return a;
}

std::string inspect_json(const CheckpointReader& reader) {
  const Metadata& m = reader.metadata();
  toml::table ints, reals, strings;
  for (const auto& [k, v] : m.ints) ints.insert(k, v);
  for (const auto& [k, v] : m.reals) reals.insert(k, v);
  for (const auto& [k, v] : m.strings) strings.insert(k, v);
  toml::array tensors;
  for (const TensorInfo& t : reader.tensors()) {
    tensors.push_back(toml::table{{"name", t.name},
                                  {"group", tensor_group(t.name)},
                                  {"shape", ints_json(t.global_shape)},
                                  {"bytes", t.bytes()},
                                  {"rectangles", static_cast<int64_t>(t.sources.size())}});
  }
  toml::array shards;
  for (const ShardInfo& s : reader.shards()) {
    shards.push_back(toml::table{{"file", s.file},
                                 {"rank", s.rank},
                                 {"datasets", s.datasets},
                                 {"data_bytes", s.data_bytes},
                                 {"file_bytes", file_bytes(reader.step_dir() / s.file)},
                                 {"xxh3", hex64(s.checksum)}});
  }
  toml::table root{
      {"step_dir", reader.step_dir().string()},
      {"step", reader.step()},
      {"format_version", reader.format_version()},
      {"layout", m.layout},
      {"model_config", m.model_config},
      {"data_cursor", m.data_cursor},
      {"rng_state_bytes", static_cast<int64_t>(m.rng_state.size())},
      {"metadata",
       toml::table{{"ints", std::move(ints)}, {"reals", std::move(reals)}, {"strings", std::move(strings)}}},
      {"tensors", std::move(tensors)},
      {"shards", std::move(shards)}};
  try {
    root.insert("world", parse_layout(m.layout).world());
  } catch (const LayoutError&) {
    // Written by another tool: no layout to count ranks from; "layout" still has the text.
  }
  std::ostringstream out;
  out << toml::json_formatter{root} << "\n";
  return out.str();
}

}  // namespace

int ckpt_inspect(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"step", true, "inspect another committed step than `latest` (DIR is then the checkpoint directory)"},
      {"fallback", false, "when the step does not open, inspect the newest older one that does (and say so)"},
      {"json", false, "print everything as JSON (tensors under their full names, metadata values whole)"},
      {"help", false, "this help"},
  };
  const std::optional<Args> parsed = parse_or_usage(argv, specs, "axonn ckpt inspect DIR [options]");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().size() != 1)
    throw UsageError("takes one DIR, got " + std::to_string(args.positionals().size()) +
                     "; usage: axonn ckpt inspect DIR [--json]");
  const StepChoice choice =
      choose_step(args.positionals()[0], args.integer("step", 0, std::numeric_limits<long>::max()));
  const CheckpointReader reader = open_step_choice(choice, args.has("fallback"), "ckpt inspect");
  std::fputs((args.has("json") ? inspect_json(reader) : inspect_text(reader)).c_str(), stdout);
  return exit_code::ok;
}

}  // namespace axonn
