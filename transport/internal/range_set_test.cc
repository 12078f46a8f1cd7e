#include "transport/internal/range_set.h"

#include "gtest/gtest.h"

namespace kvt::transport::internal {
namespace {

TEST(RangeSetTest, AdjacentRangesCoalesceIntoOne) {
  RangeSet s;
  EXPECT_TRUE(s.InsertIfDisjoint(0, 10));
  EXPECT_TRUE(s.InsertIfDisjoint(20, 30));
  EXPECT_EQ(s.pieces(), 2u);
  EXPECT_TRUE(s.InsertIfDisjoint(10, 20));
  EXPECT_EQ(s.pieces(), 1u);
}

TEST(RangeSetTest, OverlappingRangesAreRefused) {
  RangeSet s;
  ASSERT_TRUE(s.InsertIfDisjoint(100, 200));
  EXPECT_FALSE(s.InsertIfDisjoint(150, 160));  // inside
  EXPECT_FALSE(s.InsertIfDisjoint(50, 101));   // overlaps the start
  EXPECT_FALSE(s.InsertIfDisjoint(199, 300));  // overlaps the end
  EXPECT_FALSE(s.InsertIfDisjoint(0, 1000));   // covers
  EXPECT_FALSE(s.InsertIfDisjoint(100, 200));  // duplicate
  EXPECT_TRUE(s.InsertIfDisjoint(200, 201));
  EXPECT_TRUE(s.InsertIfDisjoint(99, 100));
  EXPECT_EQ(s.pieces(), 1u);
}

}  // namespace
}  // namespace kvt::transport::internal
