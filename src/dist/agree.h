// Problems that some ranks find and others may not (a config that differs, a directory one node
// cannot write): every rank passes its own finding (empty = none) and, when any rank found one,
// every rank throws the same AgreedError with the lowest such rank's finding — one report for the
// job, never a rank waiting in a collective the others left. Collective over `world`.
#pragma once
#include <string>

#include "dist/comm.h"

namespace baton::dist {

void agree_on_problems(Comm& world, const std::string& mine, const std::string& hint);

}  // namespace baton::dist
