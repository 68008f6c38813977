#pragma once
// Shared by the dispatch file (axonn_spank.cpp, the only place with exported symbols) and the
// one file per context. These functions may throw: the dispatch file catches everything at
// the C ABI and turns it into slurm_error("axonn: ...") and a failing return code.
// spank.h declares the slurm_spank_* callbacks outside its own extern "C" block; included from
// C++ they would get C++ linkage, and Slurm's loader finds them by their C names.
extern "C" {
#include <slurm/spank.h>
}

#include "plugins/spank/spank_options.hpp"

namespace axonn::spank {

// The plugstack.conf arguments, parsed once in slurm_spank_init (srun, sbatch/salloc and
// slurmstepd each load the plugin afresh) and read by every later callback.
PluginConfig& plugin_config();

// The --axonn-layout option, registered with spank_option_register() in slurm_spank_init:
// the only way an option reaches sbatch and salloc (a static spank_options table is not
// loaded in allocator context).
struct spank_option* layout_option();

// srun and sbatch/salloc, while parsing options: the value is well-formed and its mode is
// allowed here. Task counts are not known yet.
void check_option_value(const char* value);

// srun, after the step is created and before any task starts: decides the layout, prints one
// summary line, hands the decision to slurmstepd (spank_env.hpp). local_context.cpp.
void local_user_init(spank_t sp);

// slurmstepd, in each task before exec (as the user): checks srun's decision again and exports
// AXONN_LAYOUT, AXONN_SITE_CONFIG, AXONN_LAYOUT_ORIGIN. remote_context.cpp.
void remote_task_init(spank_t sp);

}  // namespace axonn::spank
