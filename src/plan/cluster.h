// A cluster for the planner: nodes, the GPUs in each (one device type per node, as in HetPipe
// §A.1), and bandwidths inside a node and from a node to the network. Read from
// configs/clusters/*.toml:
//
//   name = "selene"
//   inter_node_gbs = 200        # GB/s a node sends (and receives) to the network, all NICs together
//   [[nodes]]
//   name = "dgx"                # label (HetPipe policies group by it); default "node<i>"
//   device = "A100-80GB"        # a name from device_table()
//   gpus = 8                    # GPUs in the node
//   intra_node_gbs = 230        # GB/s per GPU between GPUs of the node (NVLink bus bandwidth / PCIe)
//   count = 560                 # identical nodes (default 1)
//   inter_node_gbs = ...        # optional per-node override of the top-level value
//   relative_speed = 14.9       # optional: the node's GPU speed, measured (e.g. from `baton profile`
//                               # on that device kind); higher = faster, any unit
//
// Every error names the file and line of the offending key. relative_speed is all or nothing: when
// every node has it, it replaces the data-sheet fp32 peak as the speed ranking of HetPipe's
// policies (hetpipe_allocate: HD's pairing); a file where some nodes have it and others not is an
// error (measured speeds and data-sheet peaks are not comparable). It changes no layer time: the
// partitioners still time each layer on its node's device (plan/cost_model.h, or --profile).
#pragma once
#include <string>
#include <vector>

#include "plan/device.h"

namespace baton::plan {

struct Node {
  std::string name;
  DeviceType device;
  int gpus = 1;
  double intra_gbs = 0;  // GB/s per GPU inside the node
  double inter_gbs = 0;  // GB/s of the whole node to the network
  double relative_speed = 0;  // measured speed of its GPUs (higher = faster); 0 = not given
};

struct Cluster {
  std::string name;
  std::string source;  // file it came from
  std::vector<Node> nodes;  // expanded (`count` copies)

  int total_gpus() const;
  bool homogeneous() const;   // one device type and one node shape
  int gpus_per_node() const;  // of node 0
  // Every node has a relative_speed (load_cluster refuses files where only some do).
  bool measured_speeds() const;
  // The cluster restricted to its first `gpus` GPUs, node by node (the last node may be partial);
  // throws Error if it has fewer.
  Cluster first_gpus(int gpus) const;
};

Cluster load_cluster(const std::string& path);
Cluster load_cluster_string(const std::string& toml_text, const std::string& origin);

}  // namespace baton::plan
