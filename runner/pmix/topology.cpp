#include "runner/pmix/topology.hpp"

#include <pmix.h>

#include <algorithm>
#include <map>

#include "runner/pmix/pretend_nodes.hpp"

namespace axonn {
namespace {

constexpr const char* kTopologyKey = "axonn.topology";

// What a rank publishes: "<node identity>\n<host name>".
std::string node_record(PmixClient& client) {
  const auto node_id = client.rank_uint(client.rank(), PMIX_NODEID);
  const std::string host = client.rank_string(client.rank(), PMIX_HOSTNAME).value_or(this_hostname());
  const std::string identity = node_id ? "id:" + std::to_string(*node_id) : "host:" + host;
  return identity + "\n" + host;
}

}  // namespace

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

  const std::string mine = node_record(client);
  client.put(kTopologyKey, std::vector<char>(mine.begin(), mine.end()));
  client.fence();

  std::map<std::string, int> node_index;  // identity -> dense index, in order of lowest rank
  t.node_of_rank.resize(static_cast<size_t>(t.world));
  for (int r = 0; r < t.world; ++r) {
    const std::vector<char> blob = client.get(r, kTopologyKey);
    const std::string text(blob.begin(), blob.end());
    const size_t newline = text.find('\n');
    if (newline == std::string::npos)
      throw PmixError("rank " + std::to_string(r) + " published a malformed " + kTopologyKey + " record '" + text +
                      "'; are all ranks running the same axonn?");
    auto [it, fresh] = node_index.try_emplace(text.substr(0, newline), static_cast<int>(node_index.size()));
    if (fresh) t.hostnames.push_back(text.substr(newline + 1));
    t.node_of_rank[static_cast<size_t>(r)] = it->second;
  }
  t.nodes = static_cast<int>(node_index.size());
  t.node = t.node_of_rank[static_cast<size_t>(t.rank)];
  for (int r = 0; r < t.world; ++r)
    if (t.node_of_rank[static_cast<size_t>(r)] == t.node) t.local_peers.push_back(r);
  t.local_size = static_cast<int>(t.local_peers.size());
  t.local_rank = static_cast<int>(std::find(t.local_peers.begin(), t.local_peers.end(), t.rank) - t.local_peers.begin());
  return t;
}

std::string describe(const Topology& t) {
  std::string peers;
  for (int p : t.local_peers) {
    if (!peers.empty()) peers += ',';
    peers += std::to_string(p);
  }
  return "rank " + std::to_string(t.rank) + "/" + std::to_string(t.world) + " node " + std::to_string(t.node) + "/" +
         std::to_string(t.nodes) + " (" + t.hostname() + ") local " + std::to_string(t.local_rank) + "/" +
         std::to_string(t.local_size) + " peers " + peers;
}

}  // namespace axonn
