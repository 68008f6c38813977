#pragma once
// The chooser's inputs: plain structs with explicit defaults, no I/O.
// `config/` fills them from the site and job TOML files; the layout library
// only reads them. Units are in the field names (bytes, seconds, FLOP/s).
#include <cstdint>
#include <string>
#include <vector>

#include "layout/element_type.hpp"

namespace axonn {

// GPT-2 shape. vocab is the padded vocabulary the model actually uses.
struct ModelShape {
  int layers = 2;
  int hidden = 64;        // C
  int heads = 4;          // H, head size C/H
  int vocab = 256;        // V
  int sequence = 64;      // T, also the number of learned position embeddings
};

// The batch in sequences. Every (data, z) coordinate processes
// global_batch / (G_data * G_z) sequences per step, in micro-batches of at most
// micro_batch sequences (the largest divisor of its share that is <= micro_batch).
struct BatchShape {
  int global_batch = 8;   // sequences per optimizer step
  int micro_batch = 1;    // sequences per forward/backward on one rank, upper bound
  ElementType dtype = ElementType::float32;
};

// One network tier: alpha-beta model of a point-to-point link.
struct Link {
  double bandwidth_bytes_per_s = 0;  // per GPU, one direction
  double latency_s = 0;              // per message
};

// What the chooser knows of the machine. Ranks are placed in blocks:
// node = rank / tasks_per_node (Slurm's default block distribution),
// switch = node / nodes_per_switch.
struct Machine {
  int nodes = 1;
  int tasks_per_node = 1;            // usually GPUs per node
  int nodes_per_switch = 0;          // 0: all nodes on one switch (no third tier)
  double peak_flops = 1e12;          // per GPU, for the job's dtype
  double compute_efficiency = 0.5;   // achieved fraction of peak for GEMMs
  double memory_bytes = 16e9;        // per GPU
  double memory_headroom = 0.1;      // fraction of memory_bytes kept free
  Link intra_node;                   // NVLink / NVSwitch / shared memory
  Link inter_node;                   // IB / Slingshot, per GPU, within one switch
  Link inter_switch;                 // between switches (used when nodes_per_switch > 0)
};

// Site policy that restricts the search.
struct Policy {
  std::vector<int> allowed_axis_sizes;  // empty: any divisor; else every axis size must be listed
  int max_tensor_parallel = 0;          // 0: no limit; else G_x * G_y * G_z <= this
};

struct ChooserInput {
  ModelShape model;
  BatchShape batch;
  Machine machine;
  Policy policy;
  int world() const { return machine.nodes * machine.tasks_per_node; }
};

}  // namespace axonn
