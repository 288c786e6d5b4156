// WSP arithmetic: waves, local and global staleness, and which pull gates which minibatch.
// HetPipe §5 "Workings of WSP" / "Global Staleness Bound" ([H] 000_*.txt; [W] 001_*.txt;
// digest notes-hetpipe-madpipe.md §B). Minibatches are 1-indexed, waves and clocks 0-indexed.
//
// - A wave is Nm minibatches; wave c is c·Nm+1 … (c+1)·Nm. s_local = Nm − 1 (§4, §5).
// - The end of clock c is the end of wave c: the VW pushes wave c's aggregated update.
// - A pull at the end of clock c waits for every VW's wave c − D; it is issued only when c ≥ D
//   ("all virtual workers start processing the first (D+1) waves without querying the global
//   weights"). It gates the one minibatch that the end of clock c would otherwise start:
//   (c+2)·Nm, the last of wave c+1 (D = 0, Nm = 4: the pull after minibatch 4 gates minibatch 8);
//   forwards run in minibatch order (§4 rule 1), so everything after it waits too.
// - s_global = (D+1)(s_local+1) + s_local − 1.
#pragma once
#include <optional>

namespace baton::wsp {

struct WspParams {
  int num_vw = 1;     // N virtual workers
  int nm = 1;         // Nm minibatches per wave (the same in every VW, §4)
  int staleness = 0;  // D, the bound on the clock distance
};

void check_params(const WspParams& p);  // throws Error (with a hint) on values WSP cannot run

inline int s_local(int nm) { return nm - 1; }
inline int s_global(int staleness, int nm) { return (staleness + 1) * nm + s_local(nm) - 1; }

inline int wave_of(int minibatch, int nm) { return (minibatch - 1) / nm; }
inline int first_of_wave(int wave, int nm) { return wave * nm + 1; }
inline int last_of_wave(int wave, int nm) { return (wave + 1) * nm; }

// Whether the end of clock c pulls (c ≥ D), and the c_global the pull waits for: every VW has
// pushed wave c − D, i.e. c_global ≥ c − D + 1.
inline bool pulls_at_end_of(int clock, int staleness) { return clock >= staleness; }
inline int pull_needs_c_global(int clock, int staleness) { return clock - staleness + 1; }

// The clock whose end-of-clock pull gates `minibatch`, if any: minibatch (c+2)·Nm waits for the
// pull issued at the end of clock c (when that clock pulls at all).
std::optional<int> gating_clock(int minibatch, int nm, int staleness);

}  // namespace baton::wsp
