// The one table of config keys (DESIGN §6). Parsing, --set overrides, validation, to_toml() and
// the "did you mean" suggestions all walk this table, so adding a key is one row in config_keys.cpp.
// Internal to src/config/.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.h"

namespace baton::config_detail {

// A field of Config, reached through a captureless accessor (one per C++ type a key can have).
template <typename T>
using Accessor = T& (*)(Config&);
using Field =
    std::variant<Accessor<int>, Accessor<int64_t>, Accessor<uint64_t>, Accessor<double>,
                 Accessor<bool>, Accessor<std::string>, Accessor<std::vector<std::string>>,
                 Accessor<std::vector<int>>, Accessor<std::vector<std::vector<int>>>,
                 Accessor<std::vector<double>>, Accessor<ModelKind>, Accessor<SyncMode>, Accessor<Placement>>;

// Allowed interval for a numeric key; an open end excludes its bound.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;

  bool contains(double v) const;
  std::string describe() const;  // ">= 1", "> 0", "in [0, 1)"; "" when unbounded
};

struct KeyDesc {
  std::string_view section;
  std::string_view name;
  Field field;
  std::string_view doc;                   // what the key means, for hints and the resolved config
  Range range = {};                       // numeric keys (and each element of a list of numbers)
  // String keys with a fixed set of values (empty = any); an enum key's names, in enum order.
  std::vector<std::string_view> allowed;
  bool non_empty = false;                 // string keys that must not be ""

  std::string full_name() const;  // "section.name"
};

// All keys in section order (the order of to_toml()).
const std::vector<KeyDesc>& config_keys();
// Section names in order.
const std::vector<std::string_view>& config_sections();

const KeyDesc* find_key(std::string_view section, std::string_view name);
// Keys written as TOML strings: string fields and the enum ones.
bool is_text_key(const KeyDesc& key);
bool is_section(std::string_view section);

// "did you mean ..." text for an unknown key / section / enum value.
std::string suggest_key(std::string_view section, std::string_view name);
std::string suggest_section(std::string_view section);
std::string suggest_value(const KeyDesc& key, std::string_view value);

// TOML text of a value, exactly as to_toml() writes it (round-trips through toml++).
std::string toml_string(std::string_view s);
std::string toml_float(double v);
std::string format_field(const KeyDesc& key, const Config& cfg);

// Edit distance (insertions, deletions, substitutions, adjacent swaps) between two short names.
int edit_distance(std::string_view a, std::string_view b);

}  // namespace baton::config_detail
