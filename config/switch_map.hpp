#pragma once
// From a site's switch map to the chooser's block model of switches.
//
// The chooser prices links with switch = node / nodes_per_switch (layout_inputs.hpp). A site
// describes its switches either by that block size (network.nodes_per_switch) or by naming
// the hosts under each switch (network.switches). For a named map this finds the block size
// that describes one allocation:
//   - exact when the allocation's nodes, in node order, come in runs on one switch each, all
//     runs of the same length except a shorter last one;
//   - otherwise the largest block size that never straddles a switch boundary, so every link
//     that really crosses switches is priced as one (some links inside a switch are priced as
//     crossing too: a pessimistic estimate, never an optimistic one).
#include <string>
#include <vector>

#include "config/site_config.hpp"

namespace axonn {

// nodes_per_switch for an allocation of `nodes` nodes; 0 when they all share one switch.
// hostnames: the allocation's node names in node order (Topology::hostnames), or empty when
// unknown, in which case the nodes are taken to fill the listed switches in order.
// Throws ConfigError when hostnames has another length than nodes, when a host is under no
// listed switch (a name "host.domain" also matches a listed "host"), or when an allocation
// without hostnames has more nodes than the map lists.
int allocation_nodes_per_switch(const SiteConfig& site, int nodes, const std::vector<std::string>& hostnames = {});

// The block size for per-node switch indices (node order), by the rule above.
int block_size_of(const std::vector<int>& switch_of_node);

}  // namespace axonn
