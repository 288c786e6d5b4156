// Text form of a Program: the golden files in tests/ and `baton schedule --format grid`. The
// grammar is in docs/schedules.md; parse(to_text(p)) == p for every Program.
//
//   # comment lines and blank lines are ignored
//   program kind=1f1b pp=2 vp=1 microbatches=2 steps=1 lowered=0
//   rank 0: 0F0s0 0F1s1 0B0s0 0B1s1
//   rank 1: 1F0s0 1B0s0 1F1s0 1B1s0
//
// An instruction is <stage><MNEMONIC>[<microbatch>][s<slot>][v<version>][p<peer>]: e.g. `0F3s1`
// (stage 0, forward of microbatch 3 in slot 1), `1SEND_ACT3s0p2` (stage 1 sends microbatch 3's
// activation to rank 2), `0OPT_STEPv1` (stage 0's optimizer step producing version 1). Fields at
// their neutral value (no microbatch, no slot, version 0, no peer) are omitted.
#pragma once
#include <string>
#include <string_view>

#include "pipeline/instr.h"

namespace baton::pipeline {

std::string to_text(const Instr& in);
std::string to_text(const Program& p);

// Throw Error naming the line and token on malformed input.
Instr parse_instr(std::string_view token);
Program parse_program(std::string_view text);

}  // namespace baton::pipeline
