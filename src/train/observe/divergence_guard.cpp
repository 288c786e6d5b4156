// DivergenceGuard; see divergence_guard.h.
#include "train/observe/divergence_guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"

namespace baton {
namespace {

double median(const std::deque<double>& d) {
  std::vector<double> v(d.begin(), d.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

void remember(std::deque<double>& d, double v, int window) {
  d.push_back(v);
  while (d.size() > static_cast<size_t>(window)) d.pop_front();
}

}  // namespace

std::optional<std::string> DivergenceGuard::check(int64_t step, double loss, double grad_norm) {
  if (first_loss_ == 0) first_loss_ = loss;
  const size_t needed = static_cast<size_t>(std::min(r_.window, 8));
  if (r_.ceiling > 0) {
    const double reference = std::max(r_.uniform_loss, first_loss_);
    if (reference > 0 && loss > r_.ceiling * reference)
      return fmt::format("loss diverged at step {}: {:.4g} is {:.3g}x {} {:.4g}", step, loss, loss / reference,
                         reference == first_loss_ ? "the first step's loss" : "a uniform guess's loss", reference);
  }
  if (r_.factor > 0 && losses_.size() >= needed) {
    const double m = median(losses_);
    if (m > 0 && loss > r_.factor * m)
      return fmt::format("loss spike at step {}: {:.4g} is {:.3g}x the median {:.4g} of the previous {} steps", step,
                         loss, loss / m, m, losses_.size());
  }
  if (r_.norm_factor > 0 && norms_.size() >= needed) {
    const double m = median(norms_);
    if (m > 0 && grad_norm > r_.norm_factor * m)
      return fmt::format("gradient norm spike at step {}: {:.4g} is {:.3g}x the median {:.4g} of the previous {} steps",
                         step, grad_norm, grad_norm / m, m, norms_.size());
  }
  remember(losses_, loss, r_.window);
  remember(norms_, grad_norm, r_.window);
  return std::nullopt;
}

std::string DivergenceGuard::state() const {
  const nlohmann::json j = {{"first_loss", first_loss_},
                            {"losses", std::vector<double>(losses_.begin(), losses_.end())},
                            {"grad_norms", std::vector<double>(norms_.begin(), norms_.end())}};
  return j.dump();
}

void DivergenceGuard::restore(const std::string& state) {
  if (state.empty()) return;
  try {
    const nlohmann::json j = nlohmann::json::parse(state);
    first_loss_ = j.at("first_loss").get<double>();
    losses_.clear();
    norms_.clear();
    for (double v : j.at("losses").get<std::vector<double>>()) remember(losses_, v, r_.window);
    for (double v : j.at("grad_norms").get<std::vector<double>>()) remember(norms_, v, r_.window);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("the checkpoint's divergence-guard history is not readable: {}", e.what()),
                "the checkpoint is damaged; resume from another");
  }
}

}  // namespace baton
