#include "checkpoint/safetensors_dir.hpp"

#include <fstream>
#include <map>
#include <sstream>

#include "core/json_reader.hpp"
#include "core/printable.hpp"

namespace axonn {
namespace {

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw SafetensorsError(file + ": " + what);
}

std::string quoted(const std::string& text) {
  std::string s = "\"";
  s += escaped_excerpt(text, 128);
  s += '"';
  return s;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_safetensors_index(std::string_view json,
                                                                         const std::string& file) {
  std::vector<std::pair<std::string, std::string>> map;
  try {
    const JsonValue root = parse_json(json);
    if (!root.is_object()) bad(file, std::string("is ") + root.type_name() + ", not an object");
    if (const JsonValue* metadata = root.find("metadata")) {
      if (!metadata->is_object()) bad(file, std::string("metadata is ") + metadata->type_name() + ", not an object");
      if (const JsonValue* total = metadata->find("total_size"); total != nullptr && total->integer() < 0)
        bad(file, "metadata.total_size is negative");
    }
    for (const auto& [name, shard] : root.at("weight_map").object()) {
      if (!shard.is_string())
        bad(file, "weight_map " + quoted(name) + " is " + shard.type_name() + ", not a shard file name");
      const std::string& f = shard.string();
      const std::filesystem::path p(f);
      bool leaves = false;
      for (const auto& part : p)
        if (part == "..") leaves = true;
      if (f.empty() || p.is_absolute() || leaves)
        bad(file, "weight_map " + quoted(name) + " names " + quoted(f) +
                      ", not a file in the model's directory (give the shard's file name)");
      map.emplace_back(name, f);
    }
  } catch (const JsonError& e) {
    bad(file, e.what());
  }
  return map;
}

SafetensorsDir::SafetensorsDir(std::filesystem::path dir) : dir_(std::move(dir)) {
  const std::filesystem::path index = dir_ / "model.safetensors.index.json";
  const std::filesystem::path single = dir_ / "model.safetensors";
  if (!std::filesystem::exists(index)) {
    if (!std::filesystem::exists(single))
      bad(dir_.string(), "holds neither model.safetensors nor model.safetensors.index.json (the files "
                         "save_pretrained writes)");
    shards_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const SafetensorsTensor& t : shards_.front()->tensors()) tensors_.emplace_back(t.name, 0);
    return;
  }
  std::ifstream in(index);
  if (!in) bad(index.string(), "cannot be opened");
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::string, size_t> shard_of_file;
  for (const auto& [name, file] : parse_safetensors_index(text.str(), index.string())) {
    auto [it, added] = shard_of_file.try_emplace(file, shards_.size());
    if (added) {
      const std::filesystem::path shard = dir_ / file;
      if (!std::filesystem::exists(shard))
        bad(shard.string(), "is missing: the index names it for tensor " + quoted(name));
      shards_.push_back(std::make_unique<SafetensorsFile>(shard));
    }
    if (shards_[it->second]->find(name) == nullptr)
      bad(shards_[it->second]->path().string(),
          "does not hold tensor " + quoted(name) + ", which the index (" + index.string() + ") puts there");
    tensors_.emplace_back(name, it->second);
  }
  // A shard's tensor the map leaves out (or puts in another shard) would be silently dropped.
  std::map<std::string, size_t> listed(tensors_.begin(), tensors_.end());
  for (size_t s = 0; s < shards_.size(); ++s)
    for (const SafetensorsTensor& t : shards_[s]->tensors()) {
      const auto it = listed.find(t.name);
      if (it == listed.end() || it->second != s)
        bad(shards_[s]->path().string(), "holds tensor " + quoted(t.name) + ", which the index (" + index.string() +
                                             ") " + (it == listed.end() ? "does not list" : "puts in another shard"));
    }
}

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> out;
  for (const auto& [name, shard] : tensors_) out.push_back(name);
  return out;
}

SafetensorsDir::Found SafetensorsDir::at(const std::string& name) const {
  for (const auto& [n, shard] : tensors_)
    if (n == name) return {shards_[shard].get(), shards_[shard]->find(name)};
  bad(dir_.string(), "has no tensor " + quoted(name));
}

}  // namespace axonn
