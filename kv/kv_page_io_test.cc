#include "kv/kv_page_io.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kv/float16.h"

namespace kvt::kv {
namespace {

constexpr uint8_t kSentinel = 0xA5;

// 2 layers, 12 blocks of 4 tokens, 3 heads of 5 channels (so a page row is 15 floats). The strides carry odd
// padding so that layer 1's tensors start at addresses no dtype is aligned to.
KvLayoutSpec SmallSpec(KvDType dtype, BlockOrder order) {
  KvLayoutSpec s;
  s.num_layers = 2;
  s.num_blocks = 12;
  s.block_tokens = 4;
  s.num_kv_heads = 3;
  s.head_dim = 5;
  s.dtype = dtype;
  s.order = order;
  s.kv_stride_bytes = uint64_t{12} * 4 * 3 * 5 * DTypeBytes(dtype) + 3;
  s.layer_stride_bytes = 2 * s.kv_stride_bytes + 5;
  return s;
}

uint64_t RegionBytes(const KvLayoutSpec& s) { return s.layer_stride_bytes * s.num_layers; }

// One layer's pages: K pages, then V pages, of `page_tokens` tokens (whole 4-token blocks here), the last shorter.
std::vector<PageSpec> PagesOfLayer(uint32_t layer, uint32_t tokens, uint32_t page_tokens) {
  std::vector<PageSpec> pages;
  for (uint32_t kind = 0; kind < 2; ++kind) {
    for (uint32_t first = 0; first < tokens; first += page_tokens) {
      pages.push_back({layer, kind, first, std::min(page_tokens, tokens - first)});
    }
  }
  return pages;
}

KvLayout MakeLayout(const KvLayoutSpec& s) {
  absl::StatusOr<KvLayout> layout = KvLayout::Create(s, RegionBytes(s));
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

// Where (layer, kind, block, token in block, head, dim) lives, from docs/FORMAT.md and layout.proto, written
// out independently of KvLayout's own arithmetic.
uint64_t HandOffset(const KvLayoutSpec& s, uint32_t layer, uint32_t kind, uint32_t block, uint32_t token,
                    uint32_t head, uint32_t dim) {
  const uint64_t element =
      s.order == BlockOrder::kNhd
          ? ((uint64_t{block} * s.block_tokens + token) * s.num_kv_heads + head) * s.head_dim + dim
          : ((uint64_t{block} * s.num_kv_heads + head) * s.block_tokens + token) * s.head_dim + dim;
  return layer * s.layer_stride_bytes + kind * s.kv_stride_bytes + element * DTypeBytes(s.dtype);
}

// A value exact in every dtype (a multiple of 1/4 in [-63.5, 63.5]) that differs across layer, kind, token
// and (global) head and dim.
float ValueAt(uint32_t layer, uint32_t kind, uint32_t token, uint32_t head, uint32_t dim) {
  const int code = static_cast<int>((token * 31 + head * 17 + dim * 7 + kind * 101 + layer * 53) % 509) - 254;
  return static_cast<float>(code) / 4;
}

void StoreAt(const KvLayoutSpec& s, std::vector<uint8_t>& region, uint64_t offset, float v) {
  switch (s.dtype) {
    case KvDType::kBfloat16: {
      const uint16_t b = static_cast<uint16_t>(FloatBits(v) >> 16);  // exact: ValueAt has 8 significant bits
      std::memcpy(&region[offset], &b, 2);
      return;
    }
    case KvDType::kFloat16: {
      const uint16_t h = FloatToFp16Bits(v);
      std::memcpy(&region[offset], &h, 2);
      return;
    }
    case KvDType::kFloat32:
      std::memcpy(&region[offset], &v, 4);
      return;
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<KvDType, BlockOrder>>& info) {
  const KvDType dtype = std::get<0>(info.param);
  return std::string(dtype == KvDType::kBfloat16   ? "Bf16"
                     : dtype == KvDType::kFloat16 ? "Fp16"
                                               : "Fp32") +
         (std::get<1>(info.param) == BlockOrder::kNhd ? "Nhd" : "Hnd");
}

class KvPageIoTest : public ::testing::TestWithParam<std::tuple<KvDType, BlockOrder>> {
 protected:
  KvPageIoTest()
      : spec_(SmallSpec(std::get<0>(GetParam()), std::get<1>(GetParam()))),
        layout_(MakeLayout(spec_)),
        region_(RegionBytes(spec_), kSentinel) {}

  // Stores the request's values for every layer, kind and token at hand-computed offsets of `region`.
  void WriteRequestByHand(std::vector<uint8_t>& region) {
    for (uint32_t layer = 0; layer < spec_.num_layers; ++layer) {
      for (uint32_t kind = 0; kind < 2; ++kind) {
        for (uint32_t t = 0; t < kTokens; ++t) {
          for (uint32_t h = 0; h < spec_.num_kv_heads; ++h) {
            for (uint32_t d = 0; d < spec_.head_dim; ++d) {
              const uint64_t offset = HandOffset(spec_, layer, kind, kBlocks[t / 4], t % 4, h, d);
              StoreAt(spec_, region, offset, ValueAt(layer, kind, t, h, d));
            }
          }
        }
      }
    }
  }

  // The page as the codec sees it: token-major, channel = head * head_dim + dim.
  std::vector<float> ExpectedPage(const PageSpec& page) {
    std::vector<float> v;
    for (uint32_t t = page.first_token; t < page.first_token + page.tokens; ++t) {
      for (uint32_t h = 0; h < spec_.num_kv_heads; ++h) {
        for (uint32_t d = 0; d < spec_.head_dim; ++d) v.push_back(ValueAt(page.layer, page.kind, t, h, d));
      }
    }
    return v;
  }

  // 18 tokens in five non-contiguous blocks, out of order; the last block holds 2 tokens.
  static constexpr uint32_t kTokens = 18;
  static constexpr uint32_t kBlocks[5] = {9, 2, 11, 0, 6};

  const KvLayoutSpec spec_;
  const KvLayout layout_;
  std::vector<uint8_t> region_;
};

constexpr uint32_t KvPageIoTest::kBlocks[5];

TEST_P(KvPageIoTest, GatherReadsWhatWasWrittenAtHandComputedOffsets) {
  WriteRequestByHand(region_);
  const std::vector<PageSpec> pages = PagesOfLayer(1, kTokens, 8);
  ASSERT_EQ(pages.size(), 6u);
  EXPECT_EQ(pages[2].tokens, 2u);  // the short last page
  for (const PageSpec& page : pages) {
    std::vector<float> out(page.tokens * 15, NAN);
    ASSERT_TRUE(GatherPage(layout_, region_, kBlocks, page, absl::MakeSpan(out)).ok());
    EXPECT_EQ(out, ExpectedPage(page)) << "kind " << page.kind << " first_token " << page.first_token;
  }
}

TEST_P(KvPageIoTest, GatherOfAPageNotAlignedToBlocksReadsAcrossThem) {
  WriteRequestByHand(region_);
  const PageSpec page{0, 1, 3, 10};  // tokens 3..12: the end of block 9, all of 2 and 11, the start of 0
  std::vector<float> out(page.tokens * 15, NAN);
  ASSERT_TRUE(GatherPage(layout_, region_, kBlocks, page, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, ExpectedPage(page));
}

TEST_P(KvPageIoTest, ScatterWritesExactlyTheHandComputedBytesAndGatherReadsThemBack) {
  for (uint32_t layer = 0; layer < spec_.num_layers; ++layer) {
    for (const PageSpec& page : PagesOfLayer(layer, kTokens, 8)) {
      const std::vector<float> values = ExpectedPage(page);
      ASSERT_TRUE(ScatterPage(layout_, absl::MakeSpan(region_), kBlocks, page, values, 0, 3).ok());
    }
  }
  std::vector<uint8_t> want(region_.size(), kSentinel);
  WriteRequestByHand(want);
  EXPECT_EQ(region_, want);  // every value in place, and not one other byte touched
  for (const PageSpec& page : PagesOfLayer(1, kTokens, 8)) {
    std::vector<float> out(page.tokens * 15);
    ASSERT_TRUE(GatherPage(layout_, region_, kBlocks, page, absl::MakeSpan(out)).ok());
    EXPECT_EQ(out, ExpectedPage(page));
  }
}

// Heterogeneous TP: the decoded page holds all 8 heads of the model; this region holds heads 2..3 only.
TEST_P(KvPageIoTest, ScatterOfAWiderPageWritesOnlyTheRegionsHeads) {
  KvLayoutSpec s = spec_;
  s.num_kv_heads = 2;
  s.head_begin = 2;
  s.total_kv_heads = 8;
  s.kv_stride_bytes = uint64_t{12} * 4 * 2 * 5 * DTypeBytes(s.dtype) + 3;
  s.layer_stride_bytes = 2 * s.kv_stride_bytes + 5;
  const KvLayout layout = MakeLayout(s);
  std::vector<uint8_t> region(RegionBytes(s), kSentinel);
  std::vector<uint8_t> want(region.size(), kSentinel);
  const PageSpec page{1, 1, 4, 9};  // tokens 4..12
  std::vector<float> values;
  for (uint32_t t = page.first_token; t < page.first_token + page.tokens; ++t) {
    for (uint32_t h = 0; h < 8; ++h) {
      for (uint32_t d = 0; d < 5; ++d) {
        values.push_back(ValueAt(1, 1, t, h, d));
        if (h == 2 || h == 3) {
          StoreAt(s, want, HandOffset(s, 1, 1, kBlocks[t / 4], t % 4, h - 2, d), ValueAt(1, 1, t, h, d));
        }
      }
    }
  }
  ASSERT_TRUE(ScatterPage(layout, absl::MakeSpan(region), kBlocks, page, values, 0, 8).ok());
  EXPECT_EQ(region, want);
}

TEST_P(KvPageIoTest, ScatterOfAPageStartingMidModelPicksTheRightHeads) {
  KvLayoutSpec s = spec_;
  s.head_begin = 4;  // heads 4..6 of 8
  s.total_kv_heads = 8;
  const KvLayout layout = MakeLayout(s);
  std::vector<uint8_t> region(RegionBytes(s), kSentinel);
  std::vector<uint8_t> want(region.size(), kSentinel);
  const PageSpec page{0, 0, 0, 4};
  std::vector<float> values;  // the page holds heads 3..7
  for (uint32_t t = 0; t < 4; ++t) {
    for (uint32_t h = 3; h < 8; ++h) {
      for (uint32_t d = 0; d < 5; ++d) {
        values.push_back(ValueAt(0, 0, t, h, d));
        if (h >= 4 && h < 7)
          StoreAt(s, want, HandOffset(s, 0, 0, kBlocks[0], t, h - 4, d), ValueAt(0, 0, t, h, d));
      }
    }
  }
  ASSERT_TRUE(ScatterPage(layout, absl::MakeSpan(region), kBlocks, page, values, 3, 5).ok());
  EXPECT_EQ(region, want);
}

// Tensor parallelism M -> N with N < M: a page of a narrower rank fills its part of the region, the region's
// other heads stay as they were. Pages that overlap the region's heads on either side write the overlap.
TEST_P(KvPageIoTest, APageWithSomeOfTheRegionsHeadsWritesThoseAndLeavesTheOthers) {
  KvLayoutSpec s = spec_;
  s.head_begin = 2;  // heads 2..4 of 8
  s.total_kv_heads = 8;
  const KvLayout layout = MakeLayout(s);
  const PageSpec page{1, 0, 0, 6};  // tokens 0..5: the second block partly
  for (const auto& [begin, heads] : {std::pair<uint32_t, uint32_t>{3, 5}, {0, 4}, {2, 2}, {4, 1}, {1, 2}}) {
    std::vector<uint8_t> region(RegionBytes(s), kSentinel);
    std::vector<uint8_t> want(region.size(), kSentinel);
    std::vector<float> values;
    for (uint32_t t = 0; t < page.tokens; ++t) {
      for (uint32_t h = begin; h < begin + heads; ++h) {
        for (uint32_t d = 0; d < 5; ++d) {
          values.push_back(ValueAt(1, 0, t, h, d));
          if (h >= 2 && h < 5) {
            StoreAt(s, want, HandOffset(s, 1, 0, kBlocks[t / 4], t % 4, h - 2, d), ValueAt(1, 0, t, h, d));
          }
        }
      }
    }
    ASSERT_TRUE(ScatterPage(layout, absl::MakeSpan(region), kBlocks, page, values, begin, heads).ok())
        << begin << "+" << heads;
    EXPECT_EQ(region, want) << begin << "+" << heads;
  }
}

TEST_P(KvPageIoTest, APageWithNoneOfTheRegionsHeadsIsRejectedAndNothingIsWritten) {
  KvLayoutSpec s = spec_;
  s.head_begin = 2;  // heads 2..4 of 8
  s.total_kv_heads = 8;
  const KvLayout layout = MakeLayout(s);
  const PageSpec page{0, 0, 0, 4};
  for (const auto& [begin, heads] : {std::pair<uint32_t, uint32_t>{5, 3}, {0, 2}, {2, 0}}) {
    const std::vector<float> values(4 * heads * 5, 1.0f);
    const absl::Status st = ScatterPage(layout, absl::MakeSpan(region_), kBlocks, page, values, begin, heads);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << begin << "+" << heads;
    EXPECT_NE(st.message().find("[2, 5)"), absl::string_view::npos) << st;
  }
  EXPECT_EQ(region_, std::vector<uint8_t>(region_.size(), kSentinel));
}

TEST_P(KvPageIoTest, ARegionSmallerThanTheLayoutIsOutOfRangeAndNothingIsWritten) {
  WriteRequestByHand(region_);
  const std::vector<uint8_t> before = region_;
  // Cut the region one byte short of layer 1's V tensor of block 11: block_ids[2] (tokens 8..11).
  const uint64_t cut = HandOffset(spec_, 1, 1, 11, 0, 0, 0) + layout_.block_bytes() - 1;
  const PageSpec page{1, 1, 0, 16};
  std::vector<float> out(16 * 15);
  absl::Status st =
      GatherPage(layout_, absl::MakeConstSpan(region_).subspan(0, cut), kBlocks, page, absl::MakeSpan(out));
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("block 11"), absl::string_view::npos) << st;
  const std::vector<float> values(16 * 15, 0.0f);
  st = ScatterPage(layout_, absl::MakeSpan(region_).subspan(0, cut), kBlocks, page, values, 0, 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_EQ(region_, before);  // blocks 9 and 2, checked before 11, were not written either
  // The same page without the cut block reads fine.
  std::vector<float> first(8 * 15);
  EXPECT_TRUE(GatherPage(layout_, absl::MakeConstSpan(region_).subspan(0, cut), kBlocks, PageSpec{1, 1, 0, 8},
                         absl::MakeSpan(first))
                  .ok());
  EXPECT_EQ(GatherPage(layout_, {}, kBlocks, PageSpec{0, 0, 0, 8}, absl::MakeSpan(first)).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_P(KvPageIoTest, PageBuffersOfTheWrongSizeAreInvalidArguments) {
  const PageSpec page{0, 0, 0, 8};
  for (size_t n : {size_t{0}, size_t{8 * 15 - 1}, size_t{8 * 15 + 1}}) {
    std::vector<float> out(n);
    const absl::Status st = GatherPage(layout_, region_, kBlocks, page, absl::MakeSpan(out));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_NE(st.message().find("needs 120"), absl::string_view::npos) << st;
    EXPECT_EQ(ScatterPage(layout_, absl::MakeSpan(region_), kBlocks, page, out, 0, 3).code(),
              absl::StatusCode::kInvalidArgument)
        << n;
  }
  EXPECT_EQ(region_, std::vector<uint8_t>(region_.size(), kSentinel));
}

TEST_P(KvPageIoTest, PagesOutsideTheRequestOrLayoutAreInvalidArguments) {
  struct Case {
    PageSpec page;
    std::vector<uint32_t> blocks;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{0, 0, 17, 4}, {9, 2, 11, 0, 6}, "need 6 blocks; the request has 5"},
      {{2, 0, 0, 4}, {9}, "layer < 2"},
      {{0, 2, 0, 4}, {9}, "kind 0 (K) or 1 (V)"},
      {{0, 0, 0, 0}, {9}, "at least one token"},
      {{0, 0, 0, 8}, {9, 12}, "block_ids[1] is 12; the region has blocks 0..11"},
  };
  for (const Case& c : cases) {
    std::vector<float> buf(c.page.tokens * 15);
    absl::Status st = GatherPage(layout_, region_, c.blocks, c.page, absl::MakeSpan(buf));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_NE(st.message().find(c.says), absl::string_view::npos) << st;
    st = ScatterPage(layout_, absl::MakeSpan(region_), c.blocks, c.page, buf, 0, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.says;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndOrders, KvPageIoTest,
                         ::testing::Combine(::testing::Values(KvDType::kBfloat16, KvDType::kFloat16, KvDType::kFloat32),
                                            ::testing::Values(BlockOrder::kNhd, BlockOrder::kHnd)),
                         ParamName);

// Narrowing on scatter, one token of one head of 8 channels in an fp16 or bf16 region.
std::vector<uint16_t> ScatterOneRow(KvDType dtype, const std::vector<float>& row) {
  KvLayoutSpec s;
  s.num_layers = 1;
  s.num_blocks = 1;
  s.block_tokens = 1;
  s.num_kv_heads = 1;
  s.head_dim = static_cast<uint32_t>(row.size());
  s.dtype = dtype;
  s.kv_stride_bytes = 2 * row.size();
  s.layer_stride_bytes = 2 * s.kv_stride_bytes;
  const KvLayout layout = MakeLayout(s);
  std::vector<uint8_t> region(RegionBytes(s));
  const uint32_t block = 0;
  EXPECT_TRUE(ScatterPage(layout, absl::MakeSpan(region), {&block, 1}, PageSpec{0, 0, 0, 1}, row, 0, 1).ok());
  std::vector<uint16_t> codes(row.size());
  std::memcpy(codes.data(), region.data(), 2 * row.size());
  return codes;
}

TEST(ScatterNarrowing, Bf16RoundsTiesToEvenKeepsNanAndOverflowsToInf) {
  const std::vector<float> row = {1.0f + 0x1p-8f,  // tie between 1 and 1+2^-7: to even, 1
                                  1.0f + 0x3p-8f,  // tie between 1+2^-7 and 1+2^-6: to even, 1+2^-6
                                  1.0f + 0x1p-8f + 0x1p-20f,  // just past the tie: up
                                  -(1.0f + 0x3p-8f),
                                  std::nanf(""),
                                  3.4e38f,  // past bf16's largest finite value (about 3.39e38)
                                  -3.4e38f,
                                  -0.0f};
  const std::vector<uint16_t> want = {0x3F80, 0x3F82, 0x3F81, 0xBF82, 0, 0x7F80, 0xFF80, 0x8000};
  const std::vector<uint16_t> got = ScatterOneRow(KvDType::kBfloat16, row);
  for (size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) {
      EXPECT_TRUE(std::isnan(Bf16BitsToFloat(got[i]))) << std::hex << got[i];
    } else {
      EXPECT_EQ(got[i], want[i]) << i;
    }
  }
}

TEST(ScatterNarrowing, Fp16RoundsTiesToEvenKeepsNanAndOverflowsToInf) {
  const std::vector<float> row = {1.0f + 0x1p-11f,  // tie between 1 and 1+2^-10: to even, 1
                                  1.0f + 0x3p-11f,  // tie: to even, 1+2^-9
                                  0x1p-25f,         // half the smallest subnormal: tie, to even 0
                                  0x3p-25f,         // tie between 1 and 2 subnormal quanta: 2
                                  std::nanf(""),
                                  65520.0f,  // midpoint between 65504 and 2^16: inf
                                  -1e9f,           65519.0f};
  const std::vector<uint16_t> want = {0x3C00, 0x3C02, 0x0000, 0x0002, 0, 0x7C00, 0xFC00, 0x7BFF};
  const std::vector<uint16_t> got = ScatterOneRow(KvDType::kFloat16, row);
  for (size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) {
      EXPECT_TRUE(std::isnan(Fp16BitsToFloat(got[i]))) << std::hex << got[i];
    } else {
      EXPECT_EQ(got[i], want[i]) << i;
    }
  }
}

}  // namespace
}  // namespace kvt::kv
