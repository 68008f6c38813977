#pragma once
// AXONN_SIMD_CLONES on a CPU op compiles it three times, for AVX-512, AVX2 and baseline
// x86-64, and the dynamic loader picks the widest version this CPU runs (GCC function
// multiversioning, an ifunc), so one portable binary still uses 16-float vectors where
// they exist. The inline helpers of vec_math.hpp are compiled into each version.
// The library builds with -ffp-contract=off: no version fuses a·b + c into an FMA, so every
// version computes the same IEEE operations in the same order and the results are bitwise
// equal whichever one runs (tests compare them against fixed expectations).
// Define AXONN_SIMD_CLONES empty (-DAXONN_SIMD_CLONES=) to build the baseline version only.
#ifndef AXONN_SIMD_CLONES
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AXONN_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AXONN_SIMD_CLONES
#endif
#endif
