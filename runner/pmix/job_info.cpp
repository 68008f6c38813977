#include "runner/pmix/job_info.hpp"

#include <pmix_server.h>

#include <cstdlib>

#include "runner/pmix/pmix_error.hpp"

namespace axonn::pmix_detail {
namespace {

// PMIx_generate_regex / PMIx_generate_ppn return a malloc'ed regex.
template <typename Generate>
std::string generate(Generate generate_fn, const std::string& input, const char* call) {
  char* regex = nullptr;
  pmix_check(generate_fn(input.c_str(), &regex), std::string(call) + "(\"" + input + "\")");
  std::string out = regex ? regex : "";
  std::free(regex);
  return out;
}

}  // namespace

std::string comma_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ranks[i]);
  }
  return out;
}

void add_job_info(InfoList& info, const std::string& nspace, const std::vector<PretendNode>& nodes) {
  uint32_t world = 0;
  for (const auto& node : nodes) world += static_cast<uint32_t>(node.ranks.size());

  info.add_string(PMIX_JOBID, nspace);
  info.add_u32(PMIX_UNIV_SIZE, world);
  info.add_u32(PMIX_JOB_SIZE, world);
  info.add_u32(PMIX_MAX_PROCS, world);
  info.add_u32(PMIX_NUM_NODES, static_cast<uint32_t>(nodes.size()));
  info.add_bool(PMIX_SPAWNED, false);

  std::string hosts, procs;  // "h0,h1" and "0,1;2,3"
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (n) {
      hosts += ',';
      procs += ';';
    }
    hosts += nodes[n].hostname;
    procs += comma_list(nodes[n].ranks);
  }
  info.add_regex(PMIX_NODE_MAP, generate(PMIx_generate_regex, hosts, "PMIx_generate_regex"));
  info.add_regex(PMIX_PROC_MAP, generate(PMIx_generate_ppn, procs, "PMIx_generate_ppn"));

  for (size_t n = 0; n < nodes.size(); ++n) {
    const PretendNode& node = nodes[n];
    const auto node_id = static_cast<uint32_t>(n);
    const auto local_size = static_cast<uint32_t>(node.ranks.size());
    InfoList node_info;
    node_info.add_u32(PMIX_NODEID, node_id);
    node_info.add_string(PMIX_HOSTNAME, node.hostname);
    node_info.add_string(PMIX_LOCAL_PEERS, comma_list(node.ranks));
    node_info.add_u32(PMIX_LOCAL_SIZE, local_size);
    node_info.add_u32(PMIX_NODE_SIZE, local_size);
    node_info.add_rank(PMIX_LOCALLDR, static_cast<pmix_rank_t>(node.ranks.front()));
    info.add_array(PMIX_NODE_INFO_ARRAY, node_info);

    for (size_t local = 0; local < node.ranks.size(); ++local) {
      const auto rank = static_cast<pmix_rank_t>(node.ranks[local]);
      InfoList proc;
      proc.add_rank(PMIX_RANK, rank);
      proc.add_u32(PMIX_APPNUM, 0);
      proc.add_rank(PMIX_APPLDR, 0);
      proc.add_rank(PMIX_GLOBAL_RANK, rank);
      proc.add_rank(PMIX_APP_RANK, rank);
      proc.add_u16(PMIX_LOCAL_RANK, static_cast<uint16_t>(local));
      proc.add_u16(PMIX_NODE_RANK, static_cast<uint16_t>(local));
      proc.add_u32(PMIX_NODEID, node_id);
      proc.add_string(PMIX_HOSTNAME, node.hostname);
      info.add_array(PMIX_PROC_DATA, proc);
    }
  }
}

}  // namespace axonn::pmix_detail
