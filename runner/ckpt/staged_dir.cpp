#include "runner/ckpt/staged_dir.hpp"

#include "checkpoint/fs_util.hpp"
#include "runner/cli/args.hpp"

namespace fs = std::filesystem;

namespace axonn {

StagedDir::StagedDir(fs::path final_dir, const std::string& what)
    : final_(fs::absolute(final_dir).lexically_normal()) {
  if (final_.filename().empty()) final_ = final_.parent_path();  // "out/" names "out"
  std::error_code ec;
  if (fs::exists(final_, ec))
    throw UsageError(what + " " + final_.string() + " already exists; name a new directory (nothing is overwritten)");
  std::string hidden = ".";  // appended: GCC 12 -O3 warns falsely (-Wrestrict) on "." + string
  hidden.append(final_.filename().string()).append(".partial");
  staging_ = final_.parent_path() / hidden;
  fs::remove_all(staging_, ec);  // left by an earlier attempt that was killed
  make_dirs(staging_);
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void StagedDir::commit() {
  fsync_dir(staging_);
  fs::rename(staging_, final_);
  fsync_dir(final_.parent_path());
  committed_ = true;
}

}  // namespace axonn
