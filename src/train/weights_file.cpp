#include "train/weights_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace baton {
namespace {
constexpr char kMagic[8] = {'B', 'A', 'T', 'O', 'N', 'W', 'T', '1'};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}
}  // namespace

void save_weights(const std::string& path, const ParamTable& table, const float* params,
                  int64_t step, const std::string& config_toml) {
  nlohmann::json h = {{"format", 1}, {"step", step}, {"config", config_toml}};
  h["tensors"] = nlohmann::json::array();
  for (int i = 0; i < table.size(); ++i)
    h["tensors"].push_back({{"name", table.spec(i).name}, {"shape", table.spec(i).shape}});
  const std::string header = h.dump();
  const std::string tmp = path + ".tmp";
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    BATON_REQUIRE(f.good(), fmt::format("cannot write {}", tmp), "check that the directory is writable");
    const uint64_t n = header.size();
    f.write(kMagic, sizeof kMagic);
    f.write(reinterpret_cast<const char*>(&n), sizeof n);
    f.write(header.data(), static_cast<std::streamsize>(n));
    for (int i = 0; i < table.size(); ++i)
      f.write(reinterpret_cast<const char*>(table.at(params, i)),
              static_cast<std::streamsize>(table.numel(i) * sizeof(float)));
    f.flush();
    BATON_REQUIRE(f.good(), fmt::format("failed writing {}", tmp), "check free disk space");
  }
  std::filesystem::rename(tmp, path);
}

WeightsFile load_weights(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BATON_REQUIRE(f.good(), fmt::format("cannot open weights file '{}'", path),
                "point --checkpoint at a file written by baton train (<run.dir>/ckpt/weights.bin)");
  char magic[8] = {};
  uint64_t n = 0;
  f.read(magic, sizeof magic);
  f.read(reinterpret_cast<char*>(&n), sizeof n);
  BATON_REQUIRE(f.good() && std::memcmp(magic, kMagic, sizeof kMagic) == 0 && n < (1u << 30),
                fmt::format("'{}' is not a baton weights file", path),
                "point --checkpoint at a file written by baton train");
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  WeightsFile w;
  try {
    auto h = nlohmann::json::parse(header);
    w.step = h.at("step").get<int64_t>();
    w.config_toml = h.at("config").get<std::string>();
    for (auto& t : h.at("tensors")) {
      w.names.push_back(t.at("name").get<std::string>());
      w.shapes.push_back(t.at("shape").get<std::vector<int64_t>>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}' has a damaged header: {}", path, e.what()),
                "the file is corrupt; use another checkpoint");
  }
  for (size_t i = 0; i < w.names.size(); ++i) {
    size_t count = 1;
    for (int64_t d : w.shapes[i]) count *= static_cast<size_t>(d);
    w.tensors.emplace_back(count);
    f.read(reinterpret_cast<char*>(w.tensors.back().data()),
           static_cast<std::streamsize>(count * sizeof(float)));
    BATON_REQUIRE(f.good(), fmt::format("'{}' is truncated (tensor '{}')", path, w.names[i]),
                  "the file is incomplete; use another checkpoint");
  }
  return w;
}

void copy_weights_into(const WeightsFile& w, const ParamTable& table, float* params,
                       const std::string& path) {
  for (int i = 0; i < table.size(); ++i) {
    const ParamSpec& spec = table.spec(i);
    auto it = std::find(w.names.begin(), w.names.end(), spec.name);
    BATON_REQUIRE(it != w.names.end(), fmt::format("'{}' has no tensor '{}'", path, spec.name),
                  "the file was written for a different model");
    const size_t k = static_cast<size_t>(it - w.names.begin());
    BATON_REQUIRE(w.shapes[k] == spec.shape,
                  fmt::format("tensor '{}' in '{}' has shape {}, the model expects {}", spec.name,
                              path, shape_str(w.shapes[k]), shape_str(spec.shape)),
                  "the file was written for a different model shape");
    std::memcpy(table.at(params, i), w.tensors[k].data(), w.tensors[k].size() * sizeof(float));
  }
}

}  // namespace baton
