#include "pmix/topology.hpp"

#include <pmix.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>

namespace axonn {

int Topology::uniform_tasks_per_node() const {
  std::vector<int> count(static_cast<size_t>(nodes), 0);
  for (int n : node_of_rank) ++count[static_cast<size_t>(n)];
  return std::all_of(count.begin(), count.end(), [&](int c) { return c == count[0]; }) ? count[0] : 0;
}

Topology topology_from_pmix(PmixClient& client) {
  Topology t;
  t.nspace = client.nspace();
  t.rank = client.rank();
  t.world = client.size();

  const auto node_id = client.rank_uint(t.rank, PMIX_NODEID);
  std::string host;
  if (auto h = client.rank_string(t.rank, PMIX_HOSTNAME)) {
    host = *h;
  } else {
    char name[HOST_NAME_MAX + 1] = {};
    gethostname(name, sizeof name - 1);
    host = name;
  }
  // Without PMIX_NODEID, the host name identifies the node.
  const std::string node_key = node_id ? "id:" + std::to_string(*node_id) : "host:" + host;
  const std::string mine = node_key + "\n" + host;
  client.put("axonn.topology", std::vector<char>(mine.begin(), mine.end()));
  client.fence();

  std::map<std::string, int> dense;  // node key -> dense index, by lowest rank
  t.node_of_rank.resize(static_cast<size_t>(t.world));
  for (int r = 0; r < t.world; ++r) {
    const std::vector<char> blob = client.get(r, "axonn.topology");
    const std::string text(blob.begin(), blob.end());
    const auto newline = text.find('\n');
    const std::string key = text.substr(0, newline);
    auto [it, fresh] = dense.try_emplace(key, static_cast<int>(dense.size()));
    if (fresh) t.hostnames.push_back(text.substr(newline + 1));
    t.node_of_rank[static_cast<size_t>(r)] = it->second;
  }
  t.nodes = static_cast<int>(dense.size());
  t.node = t.node_of_rank[static_cast<size_t>(t.rank)];
  for (int r = 0; r < t.world; ++r)
    if (t.node_of_rank[static_cast<size_t>(r)] == t.node) t.local_peers.push_back(r);
  t.local_size = static_cast<int>(t.local_peers.size());
  t.local_rank = static_cast<int>(std::find(t.local_peers.begin(), t.local_peers.end(), t.rank) - t.local_peers.begin());
  return t;
}

std::string describe(const Topology& t) {
  std::string peers;
  for (int p : t.local_peers) peers += (peers.empty() ? "" : ",") + std::to_string(p);
  return "rank " + std::to_string(t.rank) + "/" + std::to_string(t.world) + " node " + std::to_string(t.node) + "/" +
         std::to_string(t.nodes) + " (" + t.hostnames[static_cast<size_t>(t.node)] + ") local " +
         std::to_string(t.local_rank) + "/" + std::to_string(t.local_size) + " peers " + peers;
}

}  // namespace axonn
