// Cluster TOML -> Cluster. Unknown keys, wrong types and out-of-range values are errors naming
// file:line, like the training config.
#include "plan/cluster.h"

#include <toml++/toml.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace baton::plan {

int Cluster::total_gpus() const {
  int n = 0;
  for (const auto& node : nodes) n += node.gpus;
  return n;
}

bool Cluster::homogeneous() const {
  for (const auto& node : nodes)
    if (node.device.name != nodes[0].device.name || node.gpus != nodes[0].gpus) return false;
  return true;
}

int Cluster::gpus_per_node() const { return nodes.empty() ? 0 : nodes[0].gpus; }

bool Cluster::measured_speeds() const {
  if (nodes.empty()) return false;
  for (const auto& node : nodes)
    if (!(node.relative_speed > 0)) return false;
  return true;
}

Cluster Cluster::first_gpus(int gpus) const {
  if (gpus > total_gpus() || gpus < 1)
    throw Error(fmt::format("--gpus {} but cluster '{}' has {} GPUs", gpus, name, total_gpus()),
                fmt::format("use --gpus between 1 and {}, or a bigger cluster file", total_gpus()));
  Cluster c = *this;
  c.nodes.clear();
  for (const auto& node : nodes) {
    if (gpus == 0) break;
    Node n = node;
    n.gpus = std::min(n.gpus, gpus);
    gpus -= n.gpus;
    c.nodes.push_back(n);
  }
  return c;
}

namespace {

std::string at(const std::string& origin, const toml::node& n) {
  return n.source().begin.line > 0 ? fmt::format("{}:{}", origin, n.source().begin.line) : origin;
}

const char* kHint =
    "a cluster file has top-level name, inter_node_gbs and [[nodes]] tables with device, gpus, "
    "intra_node_gbs, optional name, count, inter_node_gbs and relative_speed (see configs/clusters/)";

const char* kSpeedHint =
    "relative_speed is a node's GPU speed, measured (e.g. from `baton profile` on that device kind): a "
    "number > 0, higher = faster, in any unit shared by every node of the file";

double positive(const toml::node& v, const std::string& key, const std::string& where,
                const char* hint = kHint) {
  double x;
  if (auto i = v.as_integer())
    x = static_cast<double>(i->get());
  else if (auto f = v.as_floating_point())
    x = f->get();
  else
    throw Error(fmt::format("{}: {} must be a number", where, key), hint);
  if (!(x > 0)) throw Error(fmt::format("{}: {} must be > 0, got {}", where, key, x), hint);
  return x;
}

int positive_int(const toml::node& v, const std::string& key, const std::string& where) {
  auto i = v.as_integer();
  if (!i || i->get() < 1 || i->get() > 1000000)
    throw Error(fmt::format("{}: {} must be an integer >= 1", where, key), kHint);
  return static_cast<int>(i->get());
}

std::string string_of(const toml::node& v, const std::string& key, const std::string& where) {
  auto s = v.as_string();
  if (!s) throw Error(fmt::format("{}: {} must be a string", where, key), kHint);
  return s->get();
}

}  // namespace

Cluster load_cluster_string(const std::string& text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}:{}: {}", origin, e.source().begin.line, e.description()),
                "fix the TOML syntax");
  }
  Cluster c;
  c.source = origin;
  double inter = 0;
  const toml::array* nodes = nullptr;
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    const std::string where = at(origin, v);
    if (key == "name")
      c.name = string_of(v, key, where);
    else if (key == "inter_node_gbs")
      inter = positive(v, key, where);
    else if (key == "nodes" && v.is_array_of_tables())
      nodes = v.as_array();
    else
      throw Error(fmt::format("{}: unknown cluster key '{}'", where, key), kHint);
  }
  if (!nodes || nodes->empty())
    throw Error(fmt::format("{}: no [[nodes]] in the cluster file", origin), kHint);
  int index = 0;
  struct Given {  // per [[nodes]] table: where it is, its name, whether it has relative_speed
    std::string where, name;
    bool speed;
  };
  std::vector<Given> given;
  for (const auto& entry : *nodes) {
    const auto& t = *entry.as_table();
    const std::string where_node = at(origin, entry);
    Node n;
    n.name = fmt::format("node{}", index);
    n.inter_gbs = inter;
    int count = 1;
    bool has_device = false, has_gpus = false, has_intra = false;
    for (const auto& [k, v] : t) {
      const std::string key(k.str());
      const std::string where = at(origin, v);
      if (key == "name") {
        n.name = string_of(v, key, where);
      } else if (key == "device") {
        try {
          n.device = find_device(string_of(v, key, where));
        } catch (const Error& e) {
          throw Error(fmt::format("{}: {}", where, e.what()), e.hint());
        }
        has_device = true;
      } else if (key == "gpus") {
        n.gpus = positive_int(v, key, where);
        has_gpus = true;
      } else if (key == "intra_node_gbs") {
        n.intra_gbs = positive(v, key, where);
        has_intra = true;
      } else if (key == "inter_node_gbs") {
        n.inter_gbs = positive(v, key, where);
      } else if (key == "relative_speed") {
        n.relative_speed = positive(v, key, where, kSpeedHint);
        if (!std::isfinite(n.relative_speed))
          throw Error(fmt::format("{}: relative_speed must be finite, got {}", where, n.relative_speed), kSpeedHint);
      } else if (key == "count") {
        count = positive_int(v, key, where);
      } else {
        throw Error(fmt::format("{}: unknown node key '{}'", where, key), kHint);
      }
    }
    for (auto [ok, key] : {std::pair{has_device, "device"}, {has_gpus, "gpus"},
                           {has_intra, "intra_node_gbs"}})
      if (!ok) throw Error(fmt::format("{}: node without '{}'", where_node, key), kHint);
    if (!(n.inter_gbs > 0))
      throw Error(fmt::format("{}: no inter_node_gbs for this node (nor at the top level)", where_node),
                  kHint);
    for (int i = 0; i < count; ++i) c.nodes.push_back(n);
    given.push_back({where_node, n.name, n.relative_speed > 0});
    ++index;
  }
  // relative_speed: every node or none (a measured speed does not compare with a data-sheet peak).
  for (const Given& with : given)
    if (with.speed)
      for (const Given& without : given)
        if (!without.speed)
          throw Error(fmt::format("{}: node '{}' has no relative_speed, but node '{}' ({}) has one", without.where,
                                  without.name, with.name, with.where),
                      "give every [[nodes]] table a relative_speed (measured, e.g. from `baton profile` on that "
                      "device kind) or none (then HetPipe's policies rank nodes by data-sheet fp32 peak): "
                      "measured speeds and data-sheet peaks do not mix");
  if (c.name.empty()) c.name = origin;
  return c;
}

Cluster load_cluster(const std::string& path) {
  std::ifstream f(path);
  if (!f)
    throw Error(fmt::format("cannot read cluster file '{}'", path),
                "pass --cluster with a file such as configs/clusters/selene.toml");
  std::stringstream ss;
  ss << f.rdbuf();
  return load_cluster_string(ss.str(), path);
}

}  // namespace baton::plan
