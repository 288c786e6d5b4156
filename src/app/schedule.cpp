// `baton schedule`: generate a pipeline schedule, lower, validate and simulate it, and print it as
// the text grid (one row per rank), a JSON summary, or a Chrome trace. The same pipeline library
// runs inside the trainer, so what this prints is what the executor runs.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "app/app.h"
#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "pipeline/text.h"
#include "pipeline/trace.h"
#include "pipeline/validate.h"

namespace baton::app {

namespace {

std::vector<double> parse_numbers(const std::string& text, const char* flag, const char* example) {
  std::vector<double> out;
  std::istringstream items(text);
  std::string item;
  auto bad = [&] {
    return Error(fmt::format("bad {} '{}'", flag, text),
                 fmt::format("expected comma-separated non-negative numbers, e.g. {} {}", flag, example));
  };
  while (std::getline(items, item, ',')) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      throw bad();
    }
    if (used != item.size() || !std::isfinite(v) || v < 0) throw bad();
    out.push_back(v);
  }
  if (text.empty() || text.back() == ',') throw bad();
  return out;
}

std::string json_list(const std::vector<int>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }
std::string json_list(const std::vector<double>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }

}  // namespace

int run_schedule(const ScheduleOptions& o) {
  if (o.format != "grid" && o.format != "json" && o.format != "trace")
    throw Error(fmt::format("unknown --format '{}'", o.format), "use grid, json or trace");
  const std::vector<double> c = parse_numbers(o.costs, "--costs", "1,2 or 1,1,1");
  if (c.size() < 2 || c.size() > 3 || c[0] + c[1] <= 0)
    throw Error(fmt::format("bad --costs '{}': expected F,B or F,B,W", o.costs),
                "forward and backward costs of one microbatch on one rank, e.g. --costs 1,2 (W "
                "splits off the weight-gradient part: --costs 1,1,1)");
  if (o.send < 0 || !std::isfinite(o.send))
    throw Error(fmt::format("bad --send-cost {}", o.send), "give a non-negative number, e.g. 0.1");

  pipeline::ScheduleSpec spec{.kind = o.kind,
                              .pp = o.pp,
                              .vp = o.vp,
                              .microbatches = o.microbatches,
                              .steps = o.steps,
                              .vertical_sync = o.vertical_sync};
  if (!o.replicas.empty()) {
    for (double r : parse_numbers(o.replicas, "--replicas", "2,1")) {
      if (r != std::floor(r) || r < 1)
        throw Error(fmt::format("bad --replicas '{}'", o.replicas),
                    "give one positive integer per stage, e.g. --replicas 2,1");
      spec.replicas.push_back(static_cast<int>(r));
    }
  }
  const pipeline::Program compute = pipeline::generate(spec);
  const pipeline::Program lowered = pipeline::lower(compute);
  pipeline::check_valid(lowered);
  const std::optional<double> W = c.size() == 3 ? std::optional(c[2]) : std::nullopt;
  const pipeline::Costs costs = pipeline::Costs::uniform(lowered, c[0], c[1], W, o.send);
  const pipeline::SimResult sim = pipeline::simulate(lowered, costs);

  std::string text;
  if (o.format == "grid") {
    text = fmt::format(
        "# {} pp={} vp={} microbatches={} steps={} costs F={} B={}{} | makespan {} ideal {} "
        "bubble_fraction {:.4f}\n# peak activations per rank: {}  peak weight versions: {}\n",
        spec.kind, spec.pp, spec.vp, spec.microbatches, spec.steps, c[0], c[1],
        W ? fmt::format(" W={}", *W) : "", sim.makespan, sim.ideal, sim.bubble_fraction,
        fmt::join(sim.peak_activations, " "), fmt::join(sim.peak_weight_versions, " "));
    text += pipeline::to_text(o.lowered ? lowered : compute);
  } else if (o.format == "json") {
    text = fmt::format(
        "{{\"kind\":\"{}\",\"pp\":{},\"vp\":{},\"microbatches\":{},\"steps\":{},\"ranks\":{},"
        "\"costs\":{{\"F\":{},\"B\":{}{}}},\"makespan\":{},\"ideal\":{},\"bubble_fraction\":{},"
        "\"peak_activations\":{},\"peak_weight_versions\":{},\"busy\":{},\"idle\":{}}}\n",
        spec.kind, spec.pp, spec.vp, spec.microbatches, spec.steps, lowered.num_ranks(), c[0],
        c[1], W ? fmt::format(",\"W\":{}", *W) : "", sim.makespan, sim.ideal, sim.bubble_fraction,
        json_list(sim.peak_activations), json_list(sim.peak_weight_versions), json_list(sim.busy),
        json_list(sim.idle));
  } else {
    text = pipeline::chrome_trace(lowered, sim);
  }
  if (o.output.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream f(o.output);
    if (!(f << text))
      throw Error(fmt::format("cannot write {}", o.output), "check the directory exists and is writable");
  }
  return 0;
}

}  // namespace baton::app
