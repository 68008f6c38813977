#pragma once
// The environment contract between the plugin's two halves and the trainer.
//
// Tasks get AXONN_LAYOUT (layout with its axis order, "2x2x1x1:xyzd"), AXONN_SITE_CONFIG (the
// admin's site config from plugstack.conf) and AXONN_LAYOUT_ORIGIN (one human line saying who
// chose the layout and how). `axonn train` and `axonn selftest` read them. The plugin never
// overwrites any of the three when the user's environment already has it.
//
// srun's decision reaches slurmstepd in two private variables that srun's local context sets
// in its own environment. Verified on Slurm 22.05: whatever srun's local_user_init() puts in
// srun's environment is in the step's environment (spank_getenv() in the remote context sees
// it), and a name starting with SLURM_ gets there even under `srun --export=NONE` or
// `--export=VAR,...`, which drop every other variable. The remote context removes both from
// each task's environment.
namespace axonn::spank {

inline constexpr const char* kEnvLayout = "AXONN_LAYOUT";
inline constexpr const char* kEnvSiteConfig = "AXONN_SITE_CONFIG";
inline constexpr const char* kEnvOrigin = "AXONN_LAYOUT_ORIGIN";

// When srun refuses a step (a bad --axonn-layout, a layout that cannot run, a job TOML that
// does not load), the plugin in srun writes why, one line, to the file this variable of the
// user's environment names. The job templates set it to tell "the plugin refused the step,
// axonn never started" from a run that failed.
inline constexpr const char* kEnvRefusalFile = "AXONN_REFUSAL_FILE";

inline constexpr const char* kHandoffLayout = "SLURM_AXONN_SPANK_LAYOUT";
inline constexpr const char* kHandoffOrigin = "SLURM_AXONN_SPANK_ORIGIN";

}  // namespace axonn::spank
