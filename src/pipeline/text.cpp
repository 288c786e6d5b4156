// Printer and parser of the text form (grammar in text.h and docs/schedules.md).
#include "pipeline/text.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <map>
#include <sstream>

#include "core/error.h"

namespace baton::pipeline {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Reads a non-negative decimal at `pos`; -1 (and pos unchanged) when there is none.
int read_int(std::string_view s, size_t& pos) {
  size_t end = pos;
  while (end < s.size() && is_digit(s[end])) ++end;
  if (end == pos) return -1;
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data() + pos, s.data() + end, v);
  if (ec != std::errc() || ptr != s.data() + end) return -2;
  pos = end;
  return v;
}

std::string join_ints(const std::vector<int>& v) { return fmt::format("{}", fmt::join(v, ",")); }

}  // namespace

std::string to_text(const Instr& in) {
  std::string out = fmt::format("{}{}", in.stage, op_mnemonic(in.op));
  if (in.microbatch >= 0) out += std::to_string(in.microbatch);
  if (in.slot >= 0) out += fmt::format("s{}", in.slot);
  if (in.weight_version != 0) out += fmt::format("v{}", in.weight_version);
  if (in.peer >= 0) out += fmt::format("p{}", in.peer);
  return out;
}

std::string to_text(const Program& p) {
  const ScheduleSpec& s = p.spec;
  std::string out = fmt::format("program kind={} pp={} vp={} microbatches={} steps={} lowered={}",
                                s.kind, s.pp, s.vp, s.microbatches, s.steps, p.lowered ? 1 : 0);
  if (!s.replicas.empty()) out += " replicas=" + join_ints(s.replicas);
  if (s.vertical_sync) out += " vertical_sync=1";
  if (s.nm > 0) out += fmt::format(" nm={}", s.nm);
  if (!p.tied_stages.empty()) out += " tied=" + join_ints(p.tied_stages);
  out += '\n';
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    out += fmt::format("rank {}:", r);
    for (const Instr& in : p.ranks[r]) {
      out += ' ';
      out += to_text(in);
    }
    out += '\n';
  }
  return out;
}

Instr parse_instr(std::string_view tok) {
  auto fail = [&](const char* why) {
    return Error(fmt::format("bad pipeline instruction '{}': {}", tok, why),
                 "an instruction is <stage><OP>[<microbatch>][s<slot>][v<version>][p<peer>], "
                 "e.g. 0F3s1 or 1SEND_ACT3s0p2; OP is F, B, I, W, SEND_ACT, RECV_ACT, SEND_GRAD, "
                 "RECV_GRAD, REDUCE_GRADS or OPT_STEP");
  };
  size_t pos = 0;
  Instr in;
  in.stage = read_int(tok, pos);
  if (in.stage < 0) throw fail("it must start with the stage number");
  const size_t name_start = pos;
  while (pos < tok.size() && (std::isupper(static_cast<unsigned char>(tok[pos])) || tok[pos] == '_'))
    ++pos;
  const std::string_view name = tok.substr(name_start, pos - name_start);
  bool found = false;
  for (int o = 0; o < kNumOps; ++o)
    if (op_mnemonic(static_cast<Op>(o)) == name) {
      in.op = static_cast<Op>(o);
      found = true;
    }
  if (!found) throw fail("unknown operation");
  in.microbatch = read_int(tok, pos);
  if (in.microbatch == -2) throw fail("number out of range");
  for (char field : {'s', 'v', 'p'}) {
    if (pos < tok.size() && tok[pos] == field) {
      ++pos;
      const int v = read_int(tok, pos);
      if (v < 0) throw fail("a field letter must be followed by a number");
      (field == 's' ? in.slot : field == 'v' ? in.weight_version : in.peer) = v;
    }
  }
  if (pos != tok.size()) throw fail("unexpected characters (fields go in the order s, v, p)");
  return in;
}

Program parse_program(std::string_view text) {
  Program p;
  bool have_header = false;
  std::istringstream lines{std::string(text)};
  std::string line;
  int line_no = 0;
  auto fail = [&](const std::string& what) {
    return Error(fmt::format("pipeline program line {}: {}", line_no, what),
                 "see docs/schedules.md for the text form: a `program key=value ...` line, then "
                 "one `rank N: instr instr ...` line per rank");
  };
  while (std::getline(lines, line)) {
    ++line_no;
    std::istringstream words(line);
    std::string head;
    if (!(words >> head) || head[0] == '#') continue;
    if (head == "program") {
      if (have_header) throw fail("second `program` line");
      have_header = true;
      std::string kv;
      while (words >> kv) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos) throw fail(fmt::format("expected key=value, got '{}'", kv));
        const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
        auto number = [&](const std::string& v) {
          size_t pos = 0;
          const int n = read_int(v, pos);
          if (n < 0 || pos != v.size()) throw fail(fmt::format("{} needs a number, got '{}'", key, v));
          return n;
        };
        if (key == "kind") p.spec.kind = value;
        else if (key == "pp") p.spec.pp = number(value);
        else if (key == "vp") p.spec.vp = number(value);
        else if (key == "microbatches") p.spec.microbatches = number(value);
        else if (key == "steps") p.spec.steps = number(value);
        else if (key == "lowered") p.lowered = number(value) != 0;
        else if (key == "vertical_sync") p.spec.vertical_sync = number(value) != 0;
        else if (key == "nm") p.spec.nm = number(value);
        else if (key == "replicas" || key == "tied") {
          std::istringstream items(value);
          std::string item;
          auto& list = key == "tied" ? p.tied_stages : p.spec.replicas;
          while (std::getline(items, item, ',')) list.push_back(number(item));
        } else {
          throw fail(fmt::format("unknown key '{}'", key));
        }
      }
      continue;
    }
    if (head != "rank") throw fail(fmt::format("expected `program` or `rank`, got '{}'", head));
    if (!have_header) throw fail("`rank` line before the `program` line");
    std::string id;
    words >> id;
    size_t pos = 0;
    const int r = read_int(id, pos);
    if (r < 0 || pos + 1 != id.size() || id.back() != ':')
      throw fail(fmt::format("expected `rank {}:`", p.ranks.size()));
    if (r != static_cast<int>(p.ranks.size()))
      throw fail(fmt::format("ranks must be listed in order: expected rank {}", p.ranks.size()));
    p.ranks.emplace_back();
    std::string tok;
    while (words >> tok) {
      try {
        p.ranks.back().push_back(parse_instr(tok));
      } catch (const Error& e) {
        throw Error(fmt::format("pipeline program line {}: {}", line_no, e.what()), e.hint());
      }
    }
  }
  if (!have_header) throw fail("no `program` line");
  return p;
}

}  // namespace baton::pipeline
