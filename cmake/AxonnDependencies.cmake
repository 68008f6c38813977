# Finds every dependency. A missing one stops configuration with the Debian package that
# provides it; `scripts/install-deps.sh` installs them all.
find_package(PkgConfig QUIET)

function(axonn_require found what apt_package)
  if(NOT ${found})
    message(FATAL_ERROR "axonn: ${what} not found. Install it with: apt-get install ${apt_package} "
                        "(or run scripts/install-deps.sh, which installs every dependency)")
  endif()
endfunction()

axonn_require(PkgConfig_FOUND "pkg-config" "pkg-config")

find_package(tomlplusplus CONFIG QUIET)
axonn_require(tomlplusplus_FOUND "toml++ (CMake package tomlplusplus)" "libtomlplusplus-dev")

find_package(spdlog CONFIG QUIET)
axonn_require(spdlog_FOUND "spdlog (CMake package spdlog)" "libspdlog-dev")

find_package(HDF5 QUIET COMPONENTS C)
axonn_require(HDF5_FOUND "HDF5 C library" "libhdf5-dev")

pkg_check_modules(XXHASH QUIET IMPORTED_TARGET libxxhash)
axonn_require(XXHASH_FOUND "xxHash (pkg-config libxxhash)" "libxxhash-dev")

pkg_check_modules(PMIX QUIET IMPORTED_TARGET pmix)
axonn_require(PMIX_FOUND "PMIx (pkg-config pmix)" "libpmix-dev")

pkg_check_modules(OPENBLAS QUIET IMPORTED_TARGET openblas)
axonn_require(OPENBLAS_FOUND "OpenBLAS (pkg-config openblas)" "libopenblas-dev")

find_package(Gloo CONFIG QUIET)
axonn_require(Gloo_FOUND "Gloo (CMake package Gloo)" "libgloo-dev")

if(AXONN_SLURM)
  find_path(SLURM_INCLUDE_DIR slurm/spank.h)
  axonn_require(SLURM_INCLUDE_DIR "Slurm headers (slurm/spank.h)" "libslurm-dev")
endif()

if(AXONN_TESTS)
  find_package(GTest CONFIG QUIET)
  axonn_require(GTest_FOUND "GoogleTest (CMake package GTest)" "libgtest-dev libgmock-dev")
endif()

# CUDA and NCCL: not Debian packages here; preinstalled under /usr/local/cuda when present.
set(AXONN_HAVE_CUDA OFF)
if(NOT AXONN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS /usr/local/cuda/include ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64 ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)  # CUDA::cudart, found beside nvcc
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(AXONN_HAVE_CUDA ON)
    # Imported, so its headers are SYSTEM includes: -Werror applies to our code, not NCCL's.
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                                INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    # The CUDA backend's kernels (trainer/cuda/*.cu). One architecture, sm_90 (H100), unless the
    # user chose (-DCMAKE_CUDA_ARCHITECTURES or CUDAARCHS): each one more doubles the device
    # code compile time, which small build machines feel most. Enabled here, at the top level, because
    # every target linking axonn_trainer_cuda (runner, tests) links with the CUDA runtime.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of the trainer's kernels")
    endif()
    # The shared CUDA runtime, as axonn_comm links (CUDA::cudart): CMake's default for CUDA
    # code is the static one, and two runtimes in one process do not share streams.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
  elseif(AXONN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "axonn: AXONN_CUDA=ON but nvcc (${CMAKE_CUDA_COMPILER}), the CUDA runtime or NCCL "
                        "(${NCCL_INCLUDE_DIR}, ${NCCL_LIBRARY}) was not found under /usr/local/cuda; "
                        "install the CUDA Toolkit and NCCL there, or configure with -DAXONN_CUDA=OFF")
  endif()
endif()
