// The first key on which two resolved configs (Config::to_toml() texts) differ, for ranks that must
// run the same config: "train.steps = 20 here, 10 on rank 0".
#pragma once
#include <string>

namespace baton {

// Empty when the texts describe the same config. Otherwise "section.key = <mine> here, <theirs> on
// <who>" for the first differing key in table order (values without their comments).
std::string first_config_difference(const std::string& mine, const std::string& theirs, const std::string& who);

}  // namespace baton
