#pragma once
// One line naming the checkpoint a job that cannot go on leaves behind, for `axonn run`'s
// refused restart and the sbatch templates' (`axonn train --print-newest-checkpoint`).
#include <string>

#include "config/job_config.hpp"

namespace axonn {

// "the newest committed checkpoint is step 40 in checkpoints/tiny; resume it at a size a
// layout fits", or that none is committed, or why checkpoint.dir cannot be read.
std::string newest_checkpoint(const JobConfig& job);

}  // namespace axonn
