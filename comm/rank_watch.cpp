#include "comm/rank_watch.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <sstream>

#include "comm/communicator.hpp"
#include "comm/exchange_blob.hpp"
#include "comm/group_spec.hpp"

namespace axonn {
namespace {

using Clock = std::chrono::steady_clock;

// Notices go out in batches of this many connections, so a large job's failing rank does
// not run out of file descriptors.
constexpr size_t kNoticeBatch = 256;
constexpr std::chrono::milliseconds kNoticeWindow{300};
// How long the service waits for a request line on a connection it accepted.
constexpr int kRequestWaitMs = 200;

long ms_since(Clock::time_point t) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}

socklen_t address_length(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// Names and member lists travel as single words.
std::string word(std::string s) {
  for (char& c : s)
    if (c == '|' || c == ' ' || c == '\n' || c == '\t') c = '_';
  return s;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// What a rank's service says about one group: "name|first|entered|in_flight|kind|ms|members".
struct GroupStatus {
  std::string name;
  int first = -1;
  uint64_t entered = 0;
  bool in_flight = false;
  int kind = 0;
  long ms = 0;
  std::vector<int> members;
};

struct Status {
  long idle_ms = 0;  // since the last collective ended, when none is in flight
  std::vector<GroupStatus> groups;
};

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> out;
  std::istringstream in(text);
  for (std::string r; std::getline(in, r, ',');)
    if (!r.empty()) out.push_back(std::atoi(r.c_str()));
  return out;
}

std::optional<Status> parse_status(const std::string& reply) {
  std::istringstream in(reply);
  std::string tag;
  Status s;
  size_t n = 0;
  if (!(in >> tag >> s.idle_ms >> n) || tag != "S") return std::nullopt;
  for (size_t i = 0; i < n; ++i) {
    std::string token;
    if (!(in >> token)) return std::nullopt;
    std::vector<std::string> f;
    std::istringstream parts(token);
    for (std::string p; std::getline(parts, p, '|');) f.push_back(p);
    if (f.size() != 7) return std::nullopt;
    GroupStatus g;
    g.name = f[0];
    g.first = std::atoi(f[1].c_str());
    g.entered = std::strtoull(f[2].c_str(), nullptr, 10);
    g.in_flight = f[3] == "1";
    g.kind = std::atoi(f[4].c_str());
    g.ms = std::atol(f[5].c_str());
    g.members = parse_ranks(f[6]);
    s.groups.push_back(std::move(g));
  }
  return s;
}

const char* kind_name(int kind) {
  return kind >= 0 && kind < kCollectiveKindCount ? collective_name(static_cast<CollectiveKind>(kind)) : "collective";
}

// Reads until a newline, EOF or the deadline; false unless a whole line came.
bool read_line(int fd, std::string& line, Clock::time_point deadline) {
  char buf[512];
  for (;;) {
    if (const size_t nl = line.find('\n'); nl != std::string::npos) {
      line.resize(nl);
      return true;
    }
    const long left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    line.append(buf, static_cast<size_t>(n));
  }
}

void write_text(int fd, const std::string& text, Clock::time_point deadline) {
  for (size_t done = 0; done < text.size() && Clock::now() < deadline;) {
    const ssize_t w = send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 10);
    } else {
      return;
    }
  }
}

}  // namespace

struct RankWatch::Answer {
  // gone: refused at once; vanished: accepted (by the kernel), then closed unanswered.
  enum class State { replied, silent, gone, vanished };
  int rank = -1;
  State state = State::silent;
  std::string reply;  // the line, without its newline
};

RankWatch::RankWatch(int world_rank, int world_size, const sockaddr_storage& address)
    : rank_(world_rank), size_(world_size), last_left_(Clock::now()) {
  sockaddr_storage bind_to = address;
  if (bind_to.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&bind_to)->sin6_port = 0;
  else
    reinterpret_cast<sockaddr_in*>(&bind_to)->sin_port = 0;
  listen_fd_ = socket(bind_to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<const sockaddr*>(&bind_to), address_length(bind_to)) != 0 ||
      listen(listen_fd_, 128) != 0 || pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    for (int fd : {listen_fd_, wake_[0], wake_[1]})
      if (fd >= 0) close(fd);
    throw CommError(std::string("rank watch: cannot listen for the failure diagnosis of collectives: ") +
                    std::strerror(err));
  }
  thread_ = std::thread([this] { serve(); });
}

RankWatch::~RankWatch() {
  [[maybe_unused]] ssize_t n = write(wake_[1], "x", 1);
  thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) close(fd);
}

void RankWatch::publish(Exchange& exchange, const std::string& key) {
  sockaddr_storage mine{};
  socklen_t len = sizeof mine;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&mine), &len);
  char host[HOST_NAME_MAX + 1] = {};
  gethostname(host, sizeof host - 1);
  const std::string pid = std::to_string(getpid());
  BlobPairs pairs;
  pairs["address"] =
      std::vector<char>(reinterpret_cast<const char*>(&mine), reinterpret_cast<const char*>(&mine) + sizeof mine);
  pairs["host"] = std::vector<char>(host, host + std::strlen(host));
  pairs["pid"] = std::vector<char>(pid.begin(), pid.end());
  exchange.put("axonn.watch." + key, pack_pairs(pairs));
}

void RankWatch::learn(Exchange& exchange, const std::string& key) {
  peers_.assign(static_cast<size_t>(size_), Peer{});
  for (int r = 0; r < size_; ++r) {
    const BlobPairs pairs = unpack_pairs(exchange.get(r, "axonn.watch." + key));
    Peer& p = peers_[static_cast<size_t>(r)];
    p.address = pairs.at("address");
    p.host.assign(pairs.at("host").begin(), pairs.at("host").end());
    p.pid = std::atol(std::string(pairs.at("pid").begin(), pairs.at("pid").end()).c_str());
  }
}

int RankWatch::add_group(const std::string& name, const std::vector<int>& members) {
  std::lock_guard lock(mutex_);
  Group g;
  g.name = name;
  g.members = members;
  groups_.push_back(std::move(g));
  return static_cast<int>(groups_.size()) - 1;
}

uint64_t RankWatch::enter(int slot, CollectiveKind kind) {
  std::lock_guard lock(mutex_);
  Group& g = groups_[static_cast<size_t>(slot)];
  g.in_flight = true;
  g.kind = kind;
  g.since = Clock::now();
  return ++g.entered;
}

void RankWatch::leave(int slot) {
  std::lock_guard lock(mutex_);
  groups_[static_cast<size_t>(slot)].in_flight = false;
  last_left_ = Clock::now();
}

// "S <idle ms> <groups> name|first|entered|in_flight|kind|ms|members ...": members only of
// a group in flight (the asker follows the chain into it), "-" otherwise.
std::string RankWatch::status_line() {
  std::lock_guard lock(mutex_);
  // Appended piece by piece: GCC 12's -Wrestrict misreads "literal" + std::string at -O3.
  std::string s = "S ";
  s.append(std::to_string(ms_since(last_left_))).append(" ").append(std::to_string(groups_.size()));
  for (const Group& g : groups_) {
    s.append(" ").append(word(g.name));
    s.append("|").append(std::to_string(g.members.front()));
    s.append("|").append(std::to_string(g.entered));
    s.append("|").append(g.in_flight ? "1" : "0");
    s.append("|").append(std::to_string(static_cast<int>(g.kind)));
    s.append("|").append(std::to_string(g.in_flight ? ms_since(g.since) : 0));
    s.append("|").append(g.in_flight ? format_ranks(g.members) : "-");
  }
  return s.append("\n");
}

void RankWatch::serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    for (int fd; (fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
      const auto deadline = Clock::now() + std::chrono::milliseconds(kRequestWaitMs);
      std::string line;
      if (read_line(fd, line, deadline)) {
        if (line == "S") {
          write_text(fd, status_line(), deadline);
        } else if (line.rfind("N ", 0) == 0) {
          {
            std::lock_guard lock(mutex_);
            if (!notice_) notice_ = line.substr(2);
          }
          write_text(fd, "OK\n", deadline);
        }
      }
      close(fd);
    }
  }
}

std::vector<RankWatch::Answer> RankWatch::ask(const std::vector<int>& ranks, const std::string& request,
                                              Clock::time_point deadline) const {
  struct Connection {
    int fd = -1;
    bool connected = false;
    std::string in;
  };
  std::vector<Answer> answers(ranks.size());
  std::vector<Connection> conns(ranks.size());
  auto finish = [&](size_t i, Answer::State state) {
    answers[i].state = state;
    if (conns[i].fd >= 0) close(conns[i].fd);
    conns[i].fd = -1;
  };
  auto send_request = [&](size_t i) {
    conns[i].connected = true;
    if (send(conns[i].fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
      finish(i, Answer::State::gone);
  };
  for (size_t i = 0; i < ranks.size(); ++i) {
    answers[i].rank = ranks[i];
    const std::vector<char>& bytes = peers_[static_cast<size_t>(ranks[i])].address;
    sockaddr_storage to{};
    std::memcpy(&to, bytes.data(), std::min(bytes.size(), sizeof to));
    conns[i].fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (conns[i].fd < 0) {
      finish(i, Answer::State::silent);  // out of descriptors here: no verdict on the peer
      continue;
    }
    if (connect(conns[i].fd, reinterpret_cast<const sockaddr*>(&to), address_length(to)) == 0)
      send_request(i);
    else if (errno != EINPROGRESS)
      finish(i, Answer::State::gone);  // refused: nobody listens there any more
  }
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < conns.size(); ++i)
      if (conns[i].fd >= 0) {
        fds.push_back({conns[i].fd, static_cast<short>(conns[i].connected ? POLLIN : POLLOUT), 0});
        which.push_back(i);
      }
    const long left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) break;
    if (poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const size_t i = which[k];
      Connection& c = conns[i];
      if (!c.connected) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0)
          finish(i, Answer::State::gone);
        else
          send_request(i);
        continue;
      }
      char buf[4096];
      const ssize_t n = read(c.fd, buf, sizeof buf);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        finish(i, Answer::State::vanished);  // closed without a whole answer: the process ended meanwhile
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      if (const size_t nl = c.in.find('\n'); nl != std::string::npos) {
        answers[i].reply = c.in.substr(0, nl);
        finish(i, Answer::State::replied);
      }
    }
  }
  for (size_t i = 0; i < conns.size(); ++i)
    if (conns[i].fd >= 0) finish(i, Answer::State::silent);
  return answers;
}

std::string RankWatch::who(int rank) const {
  const Peer& p = peers_[static_cast<size_t>(rank)];
  return "world rank " + std::to_string(rank) + " on host " + p.host + " (pid " + std::to_string(p.pid) + ")";
}

// The members of group (name, first member) that have not entered its collective `seq`, each
// with why; a member waiting in another group's collective is followed into that group.
// `asked` holds the ranks asked so far (and this one): each is asked once.
std::string RankWatch::explain_missing(const std::string& group_name, uint64_t first_member, uint64_t seq,
                                       const std::vector<int>& members, int depth, std::vector<int>& asked,
                                       std::vector<int>& unreachable) {
  std::vector<int> targets;
  for (int m : members)
    if (std::find(asked.begin(), asked.end(), m) == asked.end()) targets.push_back(m);
  asked.insert(asked.end(), targets.begin(), targets.end());
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  for (const Answer& a : ask(targets, "S\n", Clock::now() + kAskWindow)) {
    if (a.state != Answer::State::replied) {
      unreachable.push_back(a.rank);
      const char* why = a.state == Answer::State::silent ? "it does not answer (stopped, or hung)"
                        : a.state == Answer::State::gone
                            ? "it is gone (exited, or killed)"
                            : "it is gone: its process ended as it was asked (exited, or killed)";
      add(who(a.rank) + " did not arrive: " + why);
      continue;
    }
    const std::optional<Status> status = parse_status(a.reply);
    if (!status) continue;
    const auto here = std::find_if(status->groups.begin(), status->groups.end(), [&](const GroupStatus& g) {
      return g.name == word(group_name) && g.first == static_cast<int>(first_member);
    });
    if (here != status->groups.end() && here->entered >= seq) continue;  // it came
    const auto elsewhere =
        std::find_if(status->groups.begin(), status->groups.end(), [&](const GroupStatus& g) { return g.in_flight; });
    if (elsewhere == status->groups.end()) {
      add(who(a.rank) + " did not arrive: it runs but is in no collective (for " + std::to_string(status->idle_ms) +
          " ms)");
      continue;
    }
    std::string part = who(a.rank) + " did not arrive: it waits in " + kind_name(elsewhere->kind) + " on axis '" +
                       elsewhere->name + "' (world ranks " + format_ranks(elsewhere->members) + ") for " +
                       std::to_string(elsewhere->ms) + " ms";
    if (depth + 1 < kMaxChain) {
      const std::string deeper = explain_missing(elsewhere->name, static_cast<uint64_t>(elsewhere->first),
                                                 elsewhere->entered, elsewhere->members, depth + 1, asked, unreachable);
      if (!deeper.empty()) part += ", where " + deeper;
    }
    add(part);
  }
  return out;
}

std::string RankWatch::explain_failure(int slot, uint64_t seq, CollectiveKind kind, size_t bytes,
                                       std::chrono::milliseconds elapsed, std::chrono::milliseconds timeout,
                                       const std::string& transport_error) {
  Group g;
  std::optional<std::string> notice;
  {
    std::lock_guard lock(mutex_);
    g = groups_[static_cast<size_t>(slot)];
    notice = notice_;
  }
  const std::string head = std::string(collective_name(kind)) + " on axis '" + g.name + "' (world ranks " +
                           format_ranks(g.members) + ", " + std::to_string(bytes) + " bytes) " +
                           (elapsed >= timeout ? "timed out after " + std::to_string(timeout.count())
                                               : "failed after " + std::to_string(elapsed.count())) +
                           " ms: ";
  const std::string detail = " [" + one_line(transport_error) + "]";
  // Another rank gave up first and said why: this failure is a consequence of that one.
  if (notice) return head + *notice + detail;

  std::vector<int> asked = {rank_}, unreachable;
  const std::string missing = peers_.empty() ? ""
                                             : explain_missing(g.name, static_cast<uint64_t>(g.members.front()), seq,
                                                               g.members, 0, asked, unreachable);
  if (missing.empty()) return head + "every member had arrived; the connection failed" + detail;
  const std::string diagnosis = head + missing;

  // Every other rank learns it before this one's connections close (when it throws), so
  // the failures this one causes lead with the same cause.
  std::vector<int> others;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && std::find(unreachable.begin(), unreachable.end(), r) == unreachable.end()) others.push_back(r);
  const std::string notice_request =
      "N world rank " + std::to_string(rank_) + " gave up first: " + one_line(diagnosis) + "\n";
  for (size_t at = 0; at < others.size(); at += kNoticeBatch) {
    const std::vector<int> batch(others.begin() + static_cast<long>(at),
                                 others.begin() + static_cast<long>(std::min(others.size(), at + kNoticeBatch)));
    ask(batch, notice_request, Clock::now() + kNoticeWindow);
  }
  return diagnosis + detail;
}

}  // namespace axonn
