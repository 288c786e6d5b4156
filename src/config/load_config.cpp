// TOML text and --set overrides -> Config. This file checks names and types (a value that cannot be
// stored in its field is an error here); ranges and combinations are checked by validate(), which
// finds each key's `file:line` in Config::origins. Every error names the key and where it was set.
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "config/config.h"
#include "config/config_keys.h"
#include "core/error.h"

namespace baton {
namespace {

using config_detail::KeyDesc;

// Overrides rank after every line of the file, in command-line order.
constexpr int64_t kOverrideOrder = int64_t{1} << 40;

std::string_view type_name(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

std::string at_line(const std::string& origin, const toml::source_region& src) {
  return src.begin.line > 0 ? fmt::format("{}:{}", origin, src.begin.line) : origin;
}

// Type-checks `v` and stores it in the field `key` describes; `where` prefixes errors.
class FieldWriter {
 public:
  FieldWriter(const KeyDesc& key, const toml::node& v, const std::string& where)
      : key_(key), v_(v), where_(where) {}

  void operator()(int& dst) const {
    dst =
        static_cast<int>(integer(std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  }
  void operator()(int64_t& dst) const {
    dst = integer(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  }
  void operator()(uint64_t& dst) const {
    dst = static_cast<uint64_t>(integer(0, std::numeric_limits<int64_t>::max()));
  }
  void operator()(double& dst) const {
    if (auto i = v_.as_integer())
      dst = static_cast<double>(i->get());  // lr = 1 is a number too
    else if (auto f = v_.as_floating_point())
      dst = f->get();
    else
      wrong_type("a number");
    if (!std::isfinite(dst))
      throw Error(
          fmt::format("{}: {} must be a finite number, got {}", where_, key_.full_name(), dst),
          example_hint());
  }
  void operator()(bool& dst) const {
    if (auto b = v_.as_boolean())
      dst = b->get();
    else
      wrong_type("a boolean (true or false)");
  }
  void operator()(std::string& dst) const {
    if (auto s = v_.as_string())
      dst = s->get();
    else
      wrong_type("a string");
  }
  // An enum key: one of its names (key_.allowed, in enum order), parsed here once.
  template <typename E>
    requires std::is_enum_v<E>
  void operator()(E& dst) const {
    auto s = v_.as_string();
    if (!s) wrong_type("a string");
    const auto it = std::find(key_.allowed.begin(), key_.allowed.end(), s->get());
    if (it == key_.allowed.end())
      throw Error(fmt::format("{}: {} = {} is not an allowed value", where_, key_.full_name(),
                              config_detail::toml_string(s->get())),
                  config_detail::suggest_value(key_, s->get()));
    dst = static_cast<E>(it - key_.allowed.begin());
  }
  void operator()(std::vector<std::string>& dst) const {
    const toml::array* a = v_.as_array();
    if (!a) wrong_type("an array of strings");
    std::vector<std::string> out;
    for (const toml::node& item : *a) {
      if (!item.is_string())
        throw Error(
            fmt::format("{}: {} must be an array of strings, got an array with a {} element",
                        where_, key_.full_name(), type_name(item)),
            example_hint());
      out.push_back(item.as_string()->get());
    }
    dst = std::move(out);
  }
  void operator()(std::vector<std::vector<int>>& dst) const {
    const toml::array* a = v_.as_array();
    if (!a) wrong_type("an array of arrays of integers");
    std::vector<std::vector<int>> out;
    for (const toml::node& item : *a) {
      if (!item.is_array())
        throw Error(fmt::format("{}: {} must be an array of arrays of integers, got an array with a "
                                "{} element", where_, key_.full_name(), type_name(item)),
                    example_hint());
      out.push_back(ints(*item.as_array()));
    }
    dst = std::move(out);
  }
  void operator()(std::vector<int>& dst) const {
    const toml::array* a = v_.as_array();
    if (!a) wrong_type("an array of integers");
    dst = ints(*a);
  }
  void operator()(std::vector<double>& dst) const {
    const toml::array* a = v_.as_array();
    if (!a) wrong_type("an array of numbers");
    std::vector<double> out;
    for (const toml::node& item : *a) {
      // Numbers; a --set list without TOML syntax (1,3) arrives as strings.
      std::optional<double> x;
      if (auto i = item.as_integer()) x = static_cast<double>(i->get());
      if (auto f = item.as_floating_point()) x = f->get();
      if (auto s = item.as_string()) x = number_text(s->get());
      if (!x || !std::isfinite(*x))
        throw Error(fmt::format("{}: {} must be an array of finite numbers, got an array with a {} element{}", where_,
                                key_.full_name(), type_name(item),
                                item.is_string() ? fmt::format(" \"{}\"", item.as_string()->get()) : std::string()),
                    example_hint());
      out.push_back(*x);
    }
    dst = std::move(out);
  }

 private:
  std::vector<int> ints(const toml::array& a) const {
    std::vector<int> out;
    for (const toml::node& item : a) {
      // Integers; a --set list without TOML syntax (2,1) arrives as strings of digits.
      std::optional<int64_t> x;
      if (auto i = item.as_integer()) x = i->get();
      if (auto s = item.as_string()) {
        const std::string& t = s->get();
        if (!t.empty() && t.size() < 10 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
          x = std::stoll(t);
      }
      if (!x || *x < 0 || *x > std::numeric_limits<int>::max())
        throw Error(
            fmt::format("{}: {} must be an array of non-negative integers, got an array with a {} element",
                        where_, key_.full_name(), type_name(item)),
            example_hint());
      out.push_back(static_cast<int>(*x));
    }
    return out;
  }

  // The whole of `t` as a number ("3", "1.5", "2e-1"), or nothing.
  static std::optional<double> number_text(const std::string& t) {
    if (t.empty() || t.size() > 40) return std::nullopt;
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size()) return std::nullopt;
    return x;
  }

  int64_t integer(int64_t lo, int64_t hi) const {
    if (auto f = v_.as_floating_point()) {
      const double x = f->get();
      const bool whole = std::isfinite(x) && x == std::floor(x) && std::abs(x) < 1e18;
      throw Error(fmt::format("{}: {} must be an integer, got float {}", where_, key_.full_name(),
                              config_detail::toml_float(x)),
                  whole ? fmt::format("write it without a decimal point or exponent: {} = {}",
                                      key_.name, static_cast<int64_t>(x))
                        : example_hint());
    }
    auto i = v_.as_integer();
    if (!i) wrong_type("an integer");
    const int64_t x = i->get();
    if (x < lo || x > hi) {
      // Name the key's own lower bound when it is tighter than the field's (n_layer: [1, 2^31)).
      const int64_t shown_lo =
          std::isfinite(key_.range.lo) && key_.range.lo > static_cast<double>(lo)
              ? static_cast<int64_t>(std::ceil(key_.range.lo))
              : lo;
      throw Error(
          fmt::format("{}: {} = {} is out of range", where_, key_.full_name(), x),
          fmt::format("{} ({}) must be in [{}, {}]", key_.full_name(), key_.doc, shown_lo, hi));
    }
    return x;
  }

  [[noreturn]] void wrong_type(std::string_view expected) const {
    throw Error(
        fmt::format("{}: {} must be {}, got {}", where_, key_.full_name(), expected, type_name(v_)),
        example_hint());
  }

  std::string example_hint() const {
    const Config defaults;
    std::string example = config_detail::format_field(key_, defaults);
    if (example == "\"\"") example = "\"...\"";
    if (example == "[]")
      example = std::visit(
          [](auto get) -> std::string {
            using T = std::decay_t<decltype(get(std::declval<Config&>()))>;
            if constexpr (std::is_same_v<T, std::vector<double>>) return "[1, 2.5]";
            if constexpr (std::is_same_v<T, std::vector<int>>) return "[1, 2]";
            if constexpr (std::is_same_v<T, std::vector<std::vector<int>>>) return "[[0, 5], [5, 12]]";
            return "[\"a\", \"b\"]";
          },
          key_.field);
    return fmt::format("{} ({}): write e.g. {} = {}", key_.full_name(), key_.doc, key_.name,
                       example);
  }

  const KeyDesc& key_;
  const toml::node& v_;
  const std::string& where_;
};

void set_key(Config& cfg, const KeyDesc& key, const toml::node& v, KeyOrigin origin) {
  std::visit([&](auto get) { FieldWriter(key, v, origin.where)(get(cfg)); }, key.field);
  cfg.origins[key.full_name()] = std::move(origin);
}

[[noreturn]] void unknown_key(std::string_view section, std::string_view name,
                              const std::string& where) {
  throw Error(fmt::format("{}: unknown key '{}.{}'", where, section, name),
              config_detail::suggest_key(section, name));
}

// A key outside any section: point at the section it belongs to when there is one.
[[noreturn]] void top_level_key(std::string_view name, const std::string& where) {
  for (const KeyDesc& k : config_detail::config_keys())
    if (k.name == name)
      throw Error(fmt::format("{}: unknown key '{}' outside a section", where, name),
                  fmt::format("did you mean '{}'? (put it under [{}])", k.full_name(), k.section));
  throw Error(fmt::format("{}: unknown key '{}' outside a section", where, name),
              config_detail::suggest_section(name));
}

void apply_table(Config& cfg, const toml::table& root, const std::string& origin) {
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string where = at_line(origin, section_key.source());
    if (!config_detail::is_section(section)) {
      if (!section_node.is_table()) top_level_key(section, where);
      throw Error(fmt::format("{}: unknown section [{}]", where, section),
                  config_detail::suggest_section(section));
    }
    const toml::table* tbl = section_node.as_table();
    if (!tbl)
      throw Error(fmt::format("{}: '{}' must be a section ([{}]), got {}", where, section, section,
                              type_name(section_node)),
                  fmt::format("write the keys under a [{}] header", section));
    for (auto&& [key, value] : *tbl) {
      const toml::source_region& src = key.source().begin.line > 0 ? key.source() : value.source();
      const std::string key_where = at_line(origin, src);
      const KeyDesc* desc = config_detail::find_key(section, key.str());
      if (!desc) unknown_key(section, key.str(), key_where);
      set_key(cfg, *desc, value, KeyOrigin{key_where, static_cast<int64_t>(src.begin.line)});
    }
  }
}

toml::table parse_toml(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(std::string_view(text), std::string_view(origin));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw Error(
        fmt::format("{}:{}:{}: TOML syntax error: {}", origin, b.line, b.column, e.description()),
        "fix the TOML syntax (https://toml.io); strings need quotes, e.g. dir = \"runs/x\"");
  }
}

// "a,b" or "[a, b]" as written without TOML quotes (the shell ate them) -> ["a", "b"].
toml::array split_list(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  toml::array out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '"' || item.front() == '\''))
      item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '"' || item.back() == '\''))
      item.remove_suffix(1);
    if (!item.empty()) out.push_back(std::string(item));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

// "section.key=value": the value is read as a TOML value; text that is not one is a string.
void apply_override(Config& cfg, const std::string& text, int index) {
  const std::string where = "--set";
  const size_t eq = text.find('=');
  if (eq == std::string::npos)
    throw Error(fmt::format("{}: malformed override '{}' (no '=')", where, text),
                "write --set section.key=value, e.g. --set train.steps=100");
  const std::string path = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  const size_t dot = path.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == path.size()) {
    std::string hint = "write --set section.key=value, e.g. --set train.steps=100";
    for (const KeyDesc& k : config_detail::config_keys())
      if (k.name == path) hint = fmt::format("did you mean --set {}={}?", k.full_name(), value);
    throw Error(fmt::format("{}: malformed override '{}' (the key needs its section)", where, text),
                hint);
  }
  const std::string section = path.substr(0, dot), name = path.substr(dot + 1);
  if (!config_detail::is_section(section))
    throw Error(fmt::format("{}: unknown section [{}] in '{}'", where, section, text),
                config_detail::suggest_section(section));
  const KeyDesc* desc = config_detail::find_key(section, name);
  if (!desc) unknown_key(section, name, where);

  // Parse "v = <value>"; it must give exactly that one key, so "1\nx = 2" stays a string.
  toml::table parsed;
  bool is_toml = false;
  std::string toml_error;
  try {
    const std::string doc = "v = " + value;
    parsed = toml::parse(std::string_view(doc), std::string_view("--set"));
    is_toml = parsed.size() == 1 && parsed.contains("v");
  } catch (const toml::parse_error& e) {
    toml_error = std::string(e.description());
  }
  const bool wants_string = config_detail::is_text_key(*desc);
  const bool wants_list =
      std::holds_alternative<config_detail::Accessor<std::vector<std::string>>>(desc->field) ||
      std::holds_alternative<config_detail::Accessor<std::vector<int>>>(desc->field) ||
      std::holds_alternative<config_detail::Accessor<std::vector<double>>>(desc->field) ||
      std::holds_alternative<config_detail::Accessor<std::vector<std::vector<int>>>>(desc->field);
  // A number TOML cannot hold (an integer beyond 64 bits) is that, not "a string".
  const bool numeric = !value.empty() && (std::isdigit(static_cast<unsigned char>(value[0])) ||
                                          ((value[0] == '-' || value[0] == '+') && value.size() > 1 &&
                                           std::isdigit(static_cast<unsigned char>(value[1]))));
  if (!wants_string && !wants_list && numeric && !toml_error.empty())
    throw Error(fmt::format("{}: {} = {} is not a number TOML can hold: {}", where, desc->full_name(), value,
                            toml_error),
                fmt::format("{} ({}): give a value TOML can represent (64-bit integers, finite floats)",
                            desc->full_name(), desc->doc));
  toml::table fallback;
  const toml::node* v = is_toml ? parsed.get("v") : nullptr;
  if (v && ((wants_string && !v->is_string()) || (wants_list && !v->is_array()))) v = nullptr;
  if (!v) {
    // Not TOML (run.dir=runs/x), or a string key given a number (run.dir=2024): the text itself.
    // A list written without TOML quotes (the shell ate them): split on commas.
    if (wants_list)
      fallback.insert("v", split_list(value));
    else
      fallback.insert("v", value);
    v = fallback.get("v");
  }
  set_key(cfg, *desc, *v, KeyOrigin{where, kOverrideOrder + index});
}

// Parse, override, validate; source_path is set first so validate() can label defaults.
Config load(const std::string& text, const std::string& origin, const std::string& source_path,
            const std::vector<std::string>& overrides, int world_size) {
  Config cfg;
  cfg.source_path = source_path;
  apply_table(cfg, parse_toml(text, origin), origin);
  for (size_t i = 0; i < overrides.size(); ++i)
    apply_override(cfg, overrides[i], static_cast<int>(i));
  validate(cfg, world_size);
  return cfg;
}

std::string read_config_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(
        fmt::format("cannot read config '{}': {}", path,
                    std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"),
        "check the path (example configs are in configs/)");
  std::ifstream f(path, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  if (!f) throw Error(fmt::format("cannot read config '{}'", path), "check the file's permissions");
  return text.str();
}

}  // namespace

Config load_config_string(const std::string& toml_text, const std::string& origin,
                          const std::vector<std::string>& overrides, int world_size) {
  return load(toml_text, origin, "", overrides, world_size);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size) {
  return load(read_config_file(path), path, path, overrides, world_size);
}

std::optional<Config> peek_config(const std::string& path, const std::vector<std::string>& overrides) {
  try {
    Config cfg;
    cfg.source_path = path;
    apply_table(cfg, parse_toml(read_config_file(path), path), path);
    for (size_t i = 0; i < overrides.size(); ++i) apply_override(cfg, overrides[i], static_cast<int>(i));
    return cfg;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace baton
