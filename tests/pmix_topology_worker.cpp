// The rank program of test_pmix: reads its Topology and the raw PMIx keys, exchanges a
// blob with every other rank (a fence over all ranks and one over the ranks of its
// parity), and prints what it saw as "key=value" lines the test parses. Options make one
// rank fail in a chosen way, or wait for signals, to test the launcher around it.
//   pmix_topology_worker [--exit-rank R --exit-code C | --kill-rank R | --abort-rank R |
//                         --wait-signals | --fence-timeout-rank R | --kill-job-in-fence |
//                         --output]
#include <pmix.h>  // the key names
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runner/pmix/topology.hpp"

namespace {

using axonn::PmixClient;

std::string join(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  return out;
}

// Rank r's blob: 1000 + 17 r bytes, zeros and every byte value included.
std::vector<char> blob_of(int rank, const char* salt) {
  std::vector<char> b(static_cast<size_t>(1000 + 17 * rank));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<char>((i * 7 + static_cast<size_t>(rank) * 13 + static_cast<size_t>(salt[0])) & 0xff);
  b[0] = 0;
  return b;
}

std::string opt_or_dash(const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : "-"; }
std::string opt_or_dash(const std::optional<std::string>& v) { return v ? *v : "-"; }

void print_keys(PmixClient& c) {
  std::printf("keys rank=%d local_rank=%s nodeid=%s hostname=%s appnum=%s job_size=%s local_size=%s local_peers=%s num_nodes=%s\n",
              c.rank(), opt_or_dash(c.rank_uint(c.rank(), PMIX_LOCAL_RANK)).c_str(),
              opt_or_dash(c.rank_uint(c.rank(), PMIX_NODEID)).c_str(),
              opt_or_dash(c.rank_string(c.rank(), PMIX_HOSTNAME)).c_str(),
              opt_or_dash(c.rank_uint(c.rank(), PMIX_APPNUM)).c_str(), opt_or_dash(c.job_uint(PMIX_JOB_SIZE)).c_str(),
              opt_or_dash(c.job_uint(PMIX_LOCAL_SIZE)).c_str(), opt_or_dash(c.job_string(PMIX_LOCAL_PEERS)).c_str(),
              opt_or_dash(c.job_uint(PMIX_NUM_NODES)).c_str());
}

// Every rank's blob after a fence over all ranks, then the blobs of the ranks of this
// rank's parity after a fence over those ranks only.
void exchange(PmixClient& c) {
  c.put("test.all", blob_of(c.rank(), "a"));
  c.commit();
  c.fence();
  int ok = 0;
  std::string bad;
  for (int r = 0; r < c.size(); ++r) {
    if (r == c.rank()) continue;
    if (c.get(r, "test.all") == blob_of(r, "a"))
      ++ok;
    else {
      if (!bad.empty()) bad += ',';
      bad += std::to_string(r);
    }
  }
  std::vector<int> group;
  for (int r = c.rank() % 2; r < c.size(); r += 2) group.push_back(r);
  c.put("test.subset", blob_of(c.rank(), "s"));  // committed by the fence
  c.fence_ranks(group);
  int subset_ok = 0;
  for (int r : group)
    if (r != c.rank() && c.get(r, "test.subset") == blob_of(r, "s")) ++subset_ok;
  std::printf("exchange rank=%d ok=%d bad=%s subset=%s subset_ok=%d\n", c.rank(), ok, bad.empty() ? "-" : bad.c_str(),
              join(group).c_str(), subset_ok);
}

// Waits for SIGUSR1 (reported, keeps waiting) and SIGTERM (reported, exits 0); the
// signals were blocked before PMIx started its threads, so only sigtimedwait sees them.
int wait_for_signals(int rank) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  std::printf("ready rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
  std::fflush(stdout);
  const timespec limit{30, 0};
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &limit);
    if (sig == SIGUSR1) std::printf("got SIGUSR1 rank=%d\n", rank);
    if (sig == SIGTERM) std::printf("got SIGTERM rank=%d\n", rank);
    std::fflush(stdout);
    if (sig == SIGTERM) return 0;
    if (sig < 0) return 4;  // nobody signalled within 30 s
  }
}

std::optional<int> int_option(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return std::nullopt;
}

bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

int run(int argc, char** argv) {
  if (flag(argc, argv, "--wait-signals")) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, nullptr);
  }
  PmixClient client;
  if (const auto r = int_option(argc, argv, "--fence-timeout-rank")) {
    if (client.rank() == *r) {
      sleep(3);  // misses the fence
      return 0;
    }
    client.set_timeout(std::chrono::seconds(1));
  }
  const axonn::Topology t = axonn::topology_from_pmix(client);
  if (flag(argc, argv, "--kill-job-in-fence")) {
    // The others wait in a fence; the last rank, once they had time to reach it, SIGKILLs
    // every rank of the job (its process group) at once.
    if (t.rank == t.world - 1) {
      usleep(300'000);
      kill(0, SIGKILL);
    }
    client.fence();
    sleep(30);
    return 0;
  }
  std::string hosts;
  for (size_t i = 0; i < t.hostnames.size(); ++i) hosts += (i ? "," : "") + t.hostnames[i];
  std::printf("topology rank=%d world=%d node=%d nodes=%d local_rank=%d local_size=%d peers=%s host=%s hosts=%s nspace=%s\n",
              t.rank, t.world, t.node, t.nodes, t.local_rank, t.local_size, join(t.local_peers).c_str(),
              t.hostname().c_str(), hosts.c_str(), t.nspace.c_str());
  print_keys(client);
  exchange(client);
  std::printf("pid rank=%d pid=%d\n", t.rank, static_cast<int>(getpid()));
  std::fflush(stdout);

  if (flag(argc, argv, "--output")) {
    std::printf("out one rank=%d\nout two rank=%d\n", t.rank, t.rank);
    std::fflush(stdout);
    std::fprintf(stderr, "err line rank=%d\n", t.rank);
    std::printf("partial rank=%d", t.rank);  // no newline: the launcher adds one at exit
    return 0;
  }
  if (flag(argc, argv, "--wait-signals")) return wait_for_signals(t.rank);
  const bool failing_job = int_option(argc, argv, "--exit-rank") || int_option(argc, argv, "--kill-rank") ||
                           int_option(argc, argv, "--abort-rank");
  if (!failing_job) return 0;
  if (int_option(argc, argv, "--exit-rank") == t.rank) return int_option(argc, argv, "--exit-code").value_or(1);
  if (int_option(argc, argv, "--kill-rank") == t.rank) raise(SIGKILL);
  if (int_option(argc, argv, "--abort-rank") == t.rank) client.abort(5, "worker gave up");
  sleep(30);  // the others wait to be stopped by the launcher
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const axonn::PmixError& e) {
    std::fprintf(stderr, "pmix_topology_worker: %s\n", e.what());
    return 1;
  }
}
