// The first key on which two resolved configs (Config::to_toml() texts) differ, for ranks that must
// run the same config: "train.steps = 20 here, 10 on rank 0".
#pragma once
#include <string>
#include <vector>

namespace baton {

// Empty when the texts describe the same config. Otherwise "section.key = <mine> here, <theirs> on
// <who>" for the first differing key in table order (values without their comments).
std::string first_config_difference(const std::string& mine, const std::string& theirs, const std::string& who);

// Every key whose value differs between two resolved configs, in table order ("section.key", old
// value, new value, as TOML). Keys present on one side only are listed with "" on the other.
struct ConfigChange {
  std::string key, before, after;
};
std::vector<ConfigChange> config_changes(const std::string& before, const std::string& after);

}  // namespace baton
