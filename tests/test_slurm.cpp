// Under a real Slurm (slurmctld + one slurmd per pretend node + munge, started for each
// test by scripts/slurm-cluster.sh): `srun --mpi=pmix axonn selftest` passes the same
// checks as under `axonn run`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "process_helpers.hpp"

namespace axonn::test {
namespace {

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the slurm tests start munged and slurmd, which needs root";
    dir_ = std::string(AXONN_BINARY_DIR) + "/slurm-test-" + std::to_string(getpid());
    const auto r = run_command(kSourceDir + "/scripts/slurm-cluster.sh start --nodes 2 --dir " + dir_, 60);
    ASSERT_EQ(r.code, 0) << r.output;
    setenv("SLURM_CONF", (dir_ + "/slurm.conf").c_str(), 1);
  }
  void TearDown() override {
    if (!dir_.empty()) run_command(kSourceDir + "/scripts/slurm-cluster.sh stop --dir " + dir_ + " && rm -rf " + dir_);
  }
  std::string dir_;
};

TEST_F(Slurm, SrunSelftestOnOneNode) {
  const auto r = run_command("srun -N 1 -n 4 --mpi=pmix " + kAxonn + " selftest --layout 1x2x2x1", 90);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: 196 passed, 0 failed")) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: rank 3/4 node 0/1 (n0) local 3/4 peers 0,1,2,3")) << r.output;
}

TEST_F(Slurm, SrunSelftestAcrossTwoSlurmds) {
  // The pretend nodes' host names (n0, n1) do not resolve: Gloo binds to loopback.
  const auto r = run_command("AXONN_GLOO_HOSTNAME=127.0.0.1 AXONN_LAYOUT=2x2x1x2 srun -N 2 -n 8 --mpi=pmix " + kAxonn +
                                 " selftest",
                             90);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: 392 passed, 0 failed")) << r.output;
  EXPECT_TRUE(contains(r.output, "node 0/2 (n0)")) << r.output;
  EXPECT_TRUE(contains(r.output, "node 1/2 (n1)")) << r.output;
}

}  // namespace
}  // namespace axonn::test
