// Version vectors (src/wsp/version_vector.h): interval sets per virtual worker, prefixes, and the
// refusal to add an update twice (which would apply it twice to the weights).
#include <gtest/gtest.h>

#include "core/error.h"
#include "wsp/version_vector.h"

namespace baton::wsp {
namespace {

TEST(WspVersionVector, RangesCoalesceIntoPrefixes) {
  VersionVector v(2);
  EXPECT_EQ(v.prefix(0), 0);
  EXPECT_EQ(v.to_string(), "{}");
  v.add_range(0, 5, 7);
  EXPECT_EQ(v.prefix(0), 0);  // 1..4 missing
  EXPECT_EQ(v.max(0), 7);
  EXPECT_FALSE(v.contains_range(0, 4, 6));
  v.add_range(0, 1, 4);
  EXPECT_EQ(v.prefix(0), 7);
  EXPECT_TRUE(v.contains_range(0, 1, 7));
  EXPECT_TRUE(v.contains_range(0, 3, 2));  // empty range
  v.add(0, 9);
  EXPECT_EQ(v.prefix(0), 7);
  EXPECT_EQ(v.count(0), 8);
  EXPECT_FALSE(v.contains(0, 8));
  EXPECT_TRUE(v.contains(0, 9));
  v.add_range(1, 1, 4);
  EXPECT_EQ(v.to_string(), "vw0:1-7,9 vw1:1-4");
}

TEST(WspVersionVector, MergeIsADisjointUnion) {
  VersionVector global(2), own(2);
  global.add_range(0, 1, 4);
  global.add_range(1, 1, 4);
  own.add_range(0, 5, 7);
  VersionVector w = global;
  w.merge(own);
  EXPECT_EQ(w.to_string(), "vw0:1-7 vw1:1-4");
  EXPECT_TRUE(w.includes(global));
  EXPECT_TRUE(w.includes(own));
  EXPECT_FALSE(global.includes(w));
  // An update already present: merging it again would apply it twice.
  EXPECT_THROW(w.merge(own), Error);
  EXPECT_THROW(w.add(1, 3), Error);
  EXPECT_THROW(w.add(2, 1), Error);  // no VW 2
}

// The runtime's tags (train/hetero/wsp_stage.cpp): a pushed wave's ũ is the latest weights' updates
// less the wave start's; a merge keeps what each version holds beyond the wave start.
TEST(WspVersionVector, WithoutIsTheDifferenceOfAnIncludedSet) {
  VersionVector latest(2), start(2);
  latest.add_range(0, 1, 9);
  latest.add_range(1, 1, 4);
  start.add_range(0, 1, 2);
  start.add_range(0, 5, 6);
  start.add_range(1, 1, 4);
  const VersionVector u = latest.without(start);
  EXPECT_EQ(u.to_string(), "vw0:3-4,7-9");
  EXPECT_EQ(u.ranges(0), (std::vector<std::pair<int, int>>{{3, 4}, {7, 9}}));
  EXPECT_TRUE(u.ranges(1).empty());
  VersionVector back = u;
  back.merge(start);
  EXPECT_EQ(back, latest);
  EXPECT_EQ(latest.without(latest), VersionVector(2));
  EXPECT_THROW(start.without(latest), Error);  // start lacks some of latest
}

}  // namespace
}  // namespace baton::wsp
