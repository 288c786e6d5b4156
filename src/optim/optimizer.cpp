#include "optim/optimizer.h"

#include <algorithm>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace baton {

float* Optimizer::alloc_state() {
  auto* p = static_cast<float*>(be_.alloc(std::max<size_t>(state_size_, 1) * sizeof(float)));
  be_.zero(p, std::max<size_t>(state_size_, 1));
  return p;
}

std::vector<UpdateSegment> every_parameter(const ParamTable& table) {
  std::vector<UpdateSegment> segs;
  for (int i = 0; i < table.size(); ++i)
    segs.push_back({.flat = table.offset(i), .state = table.offset(i), .n = table.numel(i),
                    .decay = table.spec(i).decay});
  return segs;
}

std::unique_ptr<Optimizer> make_optimizer(Backend& be, std::vector<UpdateSegment> segments,
                                          size_t state_size, const OptimConfig& cfg) {
  if (cfg.kind == "adamw") return std::make_unique<AdamW>(be, std::move(segments), state_size, cfg);
  if (cfg.kind == "sgd") return std::make_unique<Sgd>(be, std::move(segments), state_size, cfg);
  throw Error(fmt::format("unknown optimizer \"{}\"", cfg.kind), "use optim.kind = \"adamw\" or \"sgd\"");
}

}  // namespace baton
