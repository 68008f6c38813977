#pragma once
// A directory written whole or not at all: files go into a hidden sibling
// (".<name>.partial"), commit() renames it to the final name, and a StagedDir destroyed
// uncommitted (an error on the way) removes it, so a failed import or export leaves nothing
// behind. The final name must not exist yet: UsageError naming it otherwise.
#include <filesystem>
#include <string>

namespace axonn {

class StagedDir {
 public:
  // `what` names the option for messages ("-o").
  StagedDir(std::filesystem::path final_dir, const std::string& what);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  const std::filesystem::path& path() const { return staging_; }  // write here
  void commit();                                                   // rename to the final name

 private:
  std::filesystem::path final_, staging_;
  bool committed_ = false;
};

}  // namespace axonn
