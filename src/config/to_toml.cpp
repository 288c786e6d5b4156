// Config -> TOML text with every key (defaults included), in table order, each with its meaning as
// a comment. load_config_string(cfg.to_toml(), ...) gives back an equal Config: floats are written
// in their shortest round-tripping form and strings with TOML escapes (config_keys.cpp).
#include <fmt/format.h>

#include <string_view>

#include "config/config.h"
#include "config/config_keys.h"

namespace baton {

std::string Config::to_toml() const {
  std::string out;
  std::string_view section;
  for (const config_detail::KeyDesc& key : config_detail::config_keys()) {
    if (key.section != section) {
      section = key.section;
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", section);
    }
    out +=
        fmt::format("{} = {}  # {}\n", key.name, config_detail::format_field(key, *this), key.doc);
  }
  return out;
}

bool Config::operator==(const Config& other) const {
  return model == other.model && data == other.data && train == other.train &&
         optim == other.optim && parallel == other.parallel && precision == other.precision &&
         checkpoint == other.checkpoint && run == other.run && hetero == other.hetero;
}

}  // namespace baton
