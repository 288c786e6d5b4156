// first_config_difference; see config_diff.h.
#include "config/config_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <vector>
#include <string_view>

namespace baton {
namespace {

// "key = value  # doc" -> {key, value}; a "[section]" line -> section; other lines are skipped.
struct Line {
  std::string key, value;
};

std::vector<Line> key_lines(const std::string& text) {
  std::vector<Line> out;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string value = line.substr(eq + 3);
    if (const size_t hash = value.rfind("  # "); hash != std::string::npos) value.resize(hash);
    out.push_back({section + "." + line.substr(0, eq), value});
  }
  return out;
}

}  // namespace

std::vector<ConfigChange> config_changes(const std::string& before, const std::string& after) {
  std::vector<ConfigChange> out;
  if (before == after) return out;
  const std::vector<Line> a = key_lines(before), b = key_lines(after);
  for (const Line& x : a) {
    auto it = std::find_if(b.begin(), b.end(), [&](const Line& y) { return y.key == x.key; });
    if (it == b.end()) out.push_back({x.key, x.value, ""});
    else if (it->value != x.value) out.push_back({x.key, x.value, it->value});
  }
  for (const Line& y : b)
    if (std::none_of(a.begin(), a.end(), [&](const Line& x) { return x.key == y.key; })) out.push_back({y.key, "", y.value});
  return out;
}

std::string first_config_difference(const std::string& mine, const std::string& theirs, const std::string& who) {
  if (mine == theirs) return {};
  const std::vector<Line> a = key_lines(mine), b = key_lines(theirs);
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].key != b[i].key)
      return fmt::format("the config keys differ ({} here, {} on {}): another baton version?", a[i].key, b[i].key,
                         who);
    if (a[i].value != b[i].value)
      return fmt::format("{} = {} here, {} on {}", a[i].key, a[i].value, b[i].value, who);
  }
  if (a.size() != b.size())
    return fmt::format("{} config keys here, {} on {}: another baton version?", a.size(), b.size(), who);
  return fmt::format("the resolved config text differs from {}'s", who);
}

}  // namespace baton
