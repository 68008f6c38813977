#include "config/switch_map.hpp"

#include <map>
#include <numeric>

#include "config/config_error.hpp"

namespace axonn {

int block_size_of(const std::vector<int>& switch_of_node) {
  std::vector<int> runs;  // lengths of runs of consecutive nodes on one switch
  for (size_t i = 0; i < switch_of_node.size(); ++i) {
    if (i == 0 || switch_of_node[i] != switch_of_node[i - 1])
      runs.push_back(1);
    else
      ++runs.back();
  }
  if (runs.size() <= 1) return 0;  // one switch: no third tier
  // Every run but the last sets the block; a shorter last run fits in its last block.
  int block = 0;
  for (size_t i = 0; i + 1 < runs.size(); ++i) block = std::gcd(block, runs[i]);
  if (runs.back() > block) block = std::gcd(block, runs.back());
  return block;
}

int allocation_nodes_per_switch(const SiteConfig& site, int nodes, const std::vector<std::string>& hostnames) {
  if (site.switches.empty()) return site.nodes_per_switch;
  std::map<std::string, int> switch_of_host;
  std::vector<int> listed_order;  // switch index of each listed host, in listing order
  for (size_t s = 0; s < site.switches.size(); ++s)
    for (const auto& host : site.switches[s]) {
      switch_of_host.emplace(host, static_cast<int>(s));
      listed_order.push_back(static_cast<int>(s));
    }
  std::vector<int> ids;
  if (hostnames.empty()) {
    if (static_cast<size_t>(nodes) > listed_order.size())
      throw ConfigError(site.source + ": network.switches lists " + std::to_string(listed_order.size()) +
                        " hosts, fewer than the " + std::to_string(nodes) +
                        " nodes asked for; list every host of the site or ask for fewer nodes");
    ids.assign(listed_order.begin(), listed_order.begin() + nodes);
    return block_size_of(ids);
  }
  if (hostnames.size() != static_cast<size_t>(nodes))
    throw ConfigError("switch map: " + std::to_string(hostnames.size()) + " hostnames for " + std::to_string(nodes) +
                      " nodes; pass one hostname per node, in node order");
  for (const auto& name : hostnames) {
    auto it = switch_of_host.find(name);
    if (it == switch_of_host.end()) it = switch_of_host.find(name.substr(0, name.find('.')));
    if (it == switch_of_host.end())
      throw ConfigError(site.source + ": host '" + name +
                        "' is under no switch in network.switches; add it to the list of its switch");
    ids.push_back(it->second);
  }
  return block_size_of(ids);
}

}  // namespace axonn
