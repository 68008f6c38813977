#include "comm/gloo_mesh.hpp"

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <map>
#include <thread>

#include "comm/communicator.hpp"
#include "comm/exchange_blob.hpp"

namespace axonn {
namespace {

// gloo::Context keeps its transport context protected; this subclass fills it in
// from pairs we connect ourselves.
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int group_rank, int group_size, const std::shared_ptr<gloo::transport::Device>& device,
              std::chrono::milliseconds timeout)
      : gloo::Context(group_rank, group_size) {
    setTimeout(timeout);
    device_ = device;
    transportContext_ = device->createContext(group_rank, group_size);
    transportContext_->setTimeout(timeout);
  }
  std::vector<char> listen(int peer) { return transportContext_->createPair(peer)->address().bytes(); }
  void connect(int peer, const std::vector<char>& address) { transportContext_->getPair(peer)->connect(address); }
};

// Key under which `from` publishes the address of its pair towards `to` in `group`.
std::string pair_key(const GroupSpec& group, int from, int to) {
  return group.name + "/" + std::to_string(group.members.front()) + "/" + std::to_string(from) + ">" +
         std::to_string(to);
}

// What the TCP device binds to: see make_gloo_device.
gloo::transport::tcp::attr device_attr(bool single_host) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("AXONN_GLOO_IFACE")) {
    attr.iface = iface;
  } else if (const char* host = std::getenv("AXONN_GLOO_HOSTNAME")) {
    attr.hostname = host;
  } else if (single_host) {
    attr.hostname = "127.0.0.1";
  } else {
    char name[HOST_NAME_MAX + 1] = {};
    gethostname(name, sizeof name - 1);
    attr.hostname = name;
    // Gloo crashes on a name it cannot resolve; say what to do instead.
    addrinfo* found = nullptr;
    if (getaddrinfo(name, nullptr, nullptr, &found) != 0)
      throw CommError(std::string("cannot resolve this host's name '") + name +
                      "' for Gloo; set AXONN_GLOO_IFACE to the network interface to use (e.g. ib0) or "
                      "AXONN_GLOO_HOSTNAME to this host's address");
    freeaddrinfo(found);
  }
  return attr;
}

}  // namespace

sockaddr_storage gloo_host_address(bool single_host) {
  try {
    sockaddr_storage address = gloo::transport::tcp::CreateDeviceAttr(device_attr(single_host)).ai_addr;
    if (address.ss_family == AF_INET6)
      reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = 0;
    else
      reinterpret_cast<sockaddr_in*>(&address)->sin_port = 0;
    return address;
  } catch (const gloo::Exception& e) {
    throw CommError(std::string("finding the Gloo TCP device's address: ") + e.what() +
                    " (set AXONN_GLOO_IFACE to the network interface to use)");
  }
}

std::shared_ptr<gloo::transport::Device> make_gloo_device(bool single_host) {
  // Gloo's TCP pairs write without MSG_NOSIGNAL: a write to a peer whose process has ended
  // raises SIGPIPE, which killed the writing rank (signal 13) before its collective could say
  // which peer was gone, and made the job's result that death instead of the peer's own
  // failure. Ignored, the write fails with EPIPE and the collective throws naming the peer.
  // A rank runs no other program, so nothing it starts inherits the setting.
  std::signal(SIGPIPE, SIG_IGN);
  const gloo::transport::tcp::attr attr = device_attr(single_host);
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const gloo::Exception& e) {
    throw CommError(std::string("creating the Gloo TCP device: ") + e.what() +
                    " (set AXONN_GLOO_IFACE to the network interface to use)");
  }
}

std::vector<std::shared_ptr<gloo::Context>> connect_gloo_groups(Exchange& exchange,
                                                                const std::shared_ptr<gloo::transport::Device>& device,
                                                                const std::vector<GroupSpec>& groups,
                                                                std::chrono::milliseconds timeout,
                                                                const std::string& key) {
  const int me = exchange.rank();
  std::vector<std::shared_ptr<MeshContext>> contexts;
  BlobPairs mine;
  for (const auto& group : groups) {
    const int rank = group_rank_of(group, me);
    auto context = std::make_shared<MeshContext>(rank, static_cast<int>(group.members.size()), device, timeout);
    for (int peer = 0; peer < context->size; ++peer) {
      if (peer != rank) mine[pair_key(group, me, group.members[static_cast<size_t>(peer)])] = context->listen(peer);
    }
    contexts.push_back(std::move(context));
  }

  // One put and one fence, the same on every rank.
  const std::string blob_key = "axonn.gloo." + key;
  exchange.put(blob_key, pack_pairs(mine));
  exchange.fence();

  // Every pair's peer address first (the Exchange is used from this thread only) ...
  struct Connection {
    MeshContext* context;
    int peer;  // group rank
    std::vector<char> address;
    std::string what;  // "rank 3 in group 'x'", for errors
    std::string error;
  };
  std::vector<Connection> connections;
  std::map<int, BlobPairs> published;  // by peer world rank, fetched once
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    auto& context = contexts[g];
    for (int peer = 0; peer < context->size; ++peer) {
      if (peer == context->rank) continue;
      const int peer_world = group.members[static_cast<size_t>(peer)];
      auto [slot, fresh] = published.try_emplace(peer_world);
      if (fresh) slot->second = unpack_pairs(exchange.get(peer_world, blob_key));
      const BlobPairs& theirs = slot->second;
      auto it = theirs.find(pair_key(group, peer_world, me));
      if (it == theirs.end())
        throw CommError("bootstrap: rank " + std::to_string(peer_world) + " published no address for rank " +
                        std::to_string(me) + " in group '" + group.name + "'; every rank must build the same groups");
      connections.push_back({context.get(), peer, it->second,
                             "rank " + std::to_string(peer_world) + " in group '" + group.name + "'", ""});
    }
  }
  // ... then every connect at once, one short-lived thread each (a rank has two pairs per
  // peer per group: about 4(n-1) threads at world size n, for the CPU path's small jobs):
  // Gloo's connect blocks until the peer has connected its side too, so connecting one
  // pair after another makes chains of ranks waiting on ranks (the bootstrap of 8 ranks
  // took twice as long that way).
  std::vector<std::thread> threads;
  for (Connection& c : connections) {
    threads.emplace_back([&c] {
      try {
        c.context->connect(c.peer, c.address);
      } catch (const gloo::Exception& e) {
        c.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Connection& c : connections)
    if (!c.error.empty()) throw CommError("connecting to " + c.what + ": " + c.error);
  std::vector<std::shared_ptr<gloo::Context>> connected(contexts.begin(), contexts.end());
  // A second fence: no rank returns (and may finish and close its sockets) while a peer is
  // still completing a connection to it, which the peer would see as "closed by peer".
  exchange.fence();
  return connected;
}

}  // namespace axonn
