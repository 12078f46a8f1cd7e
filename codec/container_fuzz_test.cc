// DecodePage on untrusted bytes: truncations, flipped bytes, crafted metadata with valid CRCs and random
// garbage always give a Status (DATA_LOSS or INVALID_ARGUMENT), never a crash or an out-of-bounds access
// (run under --config=asan).
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/test_pages.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::codec {
namespace {

const char* const kSchemes[] = {"bf16", "int8", "int4", "fp8", "lynx", "lynx-a3r5", "lynx-a2r2r4", "lynx8",
                                "lynx4", "lynx+spike"};

EncodedPage Encode(const char* scheme, int tokens = 64, int channels = 12) {
  const TestPage page = RealisticPage(tokens, channels, 99);
  absl::StatusOr<EncodedPage> enc = EncodePage(*ParseScheme(scheme), CodecOptions{}, page.view());
  EXPECT_TRUE(enc.ok()) << enc.status();
  return *std::move(enc);
}

absl::StatusCode DecodeCode(absl::Span<const uint8_t> bytes, int stages, int tokens = 64, int channels = 12) {
  std::vector<float> out(static_cast<size_t>(tokens) * channels);
  return DecodePage(bytes, stages, MutablePageView{out.data(), tokens, channels, 0}).code();
}

// Rewrites the stream CRCs and the header after a deliberate edit, as a malicious sender would.
void Reseal(std::vector<uint8_t>& b) {
  absl::StatusOr<ContainerLayout> l = ParseContainerHeader(b);
  ASSERT_TRUE(l.ok()) << l.status();
  for (int i = 0; i < l->scheme.num_streams(); ++i) {
    const size_t skip = i == 0 ? l->header_bytes : 0;
    l->stream_crc[i] = Crc32c(b.data() + l->stream_offset[i] + skip, l->stream_length[i] - skip);
  }
  WriteContainerHeader(*l, b.data());
}

TEST(ContainerFuzzTest, EveryTruncationIsAnInvalidArgumentForTheStagesItCuts) {
  for (const char* scheme : kSchemes) {
    EncodedPage enc = Encode(scheme);
    const int streams = enc.layout.scheme.num_streams();
    for (size_t len = 0; len < enc.bytes.size(); ++len) {
      const absl::Span<const uint8_t> prefix = absl::MakeConstSpan(enc.bytes).first(len);
      for (int stages = 1; stages <= streams; ++stages) {
        const size_t need = enc.layout.stream_offset[stages - 1] + enc.layout.stream_length[stages - 1];
        const absl::StatusCode code = DecodeCode(prefix, stages);
        if (len >= need) {
          EXPECT_EQ(code, absl::StatusCode::kOk) << scheme << " len " << len << " stages " << stages;
        } else {
          EXPECT_EQ(code, absl::StatusCode::kInvalidArgument) << scheme << " len " << len << " stages " << stages;
        }
      }
    }
  }
}

TEST(ContainerFuzzTest, EveryFlippedByteIsDetected) {
  for (const char* scheme : kSchemes) {
    EncodedPage enc = Encode(scheme, 32, 8);
    const int streams = enc.layout.scheme.num_streams();
    for (size_t i = 0; i < enc.bytes.size(); ++i) {
      std::vector<uint8_t> b = enc.bytes;
      b[i] ^= 0x5A;
      const absl::StatusCode code = DecodeCode(b, streams, 32, 8);
      if (i < kContainerHeaderBytes) {
        EXPECT_TRUE(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kInvalidArgument)
            << scheme << " byte " << i << " gave " << code;
      } else {
        EXPECT_EQ(code, absl::StatusCode::kDataLoss) << scheme << " byte " << i;
      }
    }
  }
}

TEST(ContainerFuzzTest, AFlipInALaterStreamDoesNotDisturbTheAnchorOnlyDecode) {
  EncodedPage enc = Encode("lynx");
  std::vector<uint8_t> b = enc.bytes;
  b[enc.layout.stream_offset[1] + 3] ^= 0xFF;
  EXPECT_EQ(DecodeCode(b, 1), absl::StatusCode::kOk);
  EXPECT_EQ(DecodeCode(b, 2), absl::StatusCode::kDataLoss);
}

TEST(ContainerFuzzTest, ResealedMetadataNoEncoderWritesIsDataLoss) {
  auto expect_data_loss = [](const char* scheme, auto edit) {
    EncodedPage enc = Encode(scheme);
    std::vector<uint8_t> b = enc.bytes;
    uint8_t* payload = b.data() + kContainerHeaderBytes;
    edit(payload);
    Reseal(b);
    EXPECT_EQ(DecodeCode(b, enc.layout.scheme.num_streams()), absl::StatusCode::kDataLoss) << scheme;
  };
  auto put_float = [](uint8_t* p, float v) { std::memcpy(p, &v, 4); };
  // lynx: lo (channel 0) NaN, lo > hi, hi infinite.
  expect_data_loss("lynx", [&](uint8_t* p) { put_float(p, std::nanf("")); });
  expect_data_loss("lynx", [&](uint8_t* p) { put_float(p, 1e30f); });
  expect_data_loss("lynx", [&](uint8_t* p) { put_float(p + 4 * 12, INFINITY); });
  // Offsets (docs/FORMAT.md, a 64 x 12 page, 16-token chunks): lo, hi (12 ch x 4 B each), 14-bit end pairs (4
  // chunks x 12 ch: 84 B); lynx: 3 frame spikes per channel, values (36 x 4 B) then tokens (36 x 2 B), then the
  // anchor table (8 x f32); lynx+spike: spike values (48 x 4 B) and spike indices (48), then the table.
  constexpr size_t kEnds = 96, kAfterEnds = kEnds + 84;
  constexpr size_t kFrameValues = kAfterEnds, kFrameTokens = kFrameValues + 36 * 4, kTable = kFrameTokens + 36 * 2;
  constexpr size_t kSpikeValues = kAfterEnds, kSpikeIndex = kSpikeValues + 48 * 4;
  // lynx: an end pair index past the grid (all 14 bits set), an anchor table entry NaN or above 1.
  expect_data_loss("lynx", [&](uint8_t* p) { p[kEnds] = 0xFF; p[kEnds + 1] |= 0x3F; });
  expect_data_loss("lynx", [&](uint8_t* p) { put_float(p + kTable, std::nanf("")); });
  expect_data_loss("lynx", [&](uint8_t* p) { put_float(p + kTable + 4 * 7, 1.5f); });
  // lynx: a frame spike NaN, past the page, or repeating its channel's token.
  expect_data_loss("lynx", [&](uint8_t* p) { put_float(p + kFrameValues + 4 * 5, std::nanf("")); });
  expect_data_loss("lynx", [&](uint8_t* p) { p[kFrameTokens] = 64; p[kFrameTokens + 1] = 0; });
  expect_data_loss("lynx", [&](uint8_t* p) { std::memcpy(p + kFrameTokens + 2 * 12, p + kFrameTokens, 2); });
  // lynx+spike: spike index past the chunk, spike value NaN.
  expect_data_loss("lynx+spike", [&](uint8_t* p) { p[kSpikeIndex] = 16; });
  expect_data_loss("lynx+spike", [&](uint8_t* p) { put_float(p + kSpikeValues, std::nanf("")); });
  // int8: fp16 min = inf (0x7C00); fp8: scale NaN, scale so large that 448 * scale overflows, a NaN code.
  expect_data_loss("int8", [&](uint8_t* p) { p[0] = 0x00; p[1] = 0x7C; });
  expect_data_loss("fp8", [&](uint8_t* p) { put_float(p, std::nanf("")); });
  expect_data_loss("fp8", [&](uint8_t* p) { put_float(p, 3e38f); });
  expect_data_loss("fp8", [&](uint8_t* p) { p[4 * 64] = 0x7F; });
}

TEST(ContainerFuzzTest, AnEndPairPastTheGridOnAWidePageIsDataLossNamingItsChunkAndChannelInEveryImplementation) {
  // 48 channels: the AVX-512 decoder's fused pass (whole 16-channel blocks) meets the bad index, gives up, and the
  // unfused pass names it.
  constexpr int kTokens = 64, kChannels = 48, kBits = 14;
  const EncodedPage enc = Encode("lynx", kTokens, kChannels);
  for (int field : {2 * kChannels + 37, 4 * kChannels - 1, 0}) {
    std::vector<uint8_t> b = enc.bytes;
    uint8_t* ends = b.data() + kContainerHeaderBytes + 8 * kChannels;  // after lo and hi
    for (int bit = 0; bit < kBits; ++bit) {  // all ones: 16383, past the 14-bit grid's 16109
      const int at = field * kBits + bit;
      ends[at / 8] |= static_cast<uint8_t>(1u << (at % 8));
    }
    Reseal(b);
    for (CodecImpl impl : {CodecImpl::kReference, CodecImpl::kAvx2, CodecImpl::kAvx512}) {
      if (!ImplAvailable(impl)) continue;
      CodecOptions options;
      options.impl = impl;
      std::vector<float> out(static_cast<size_t>(kTokens) * kChannels);
      const absl::Status st = DecodePage(b, 1, MutablePageView{out.data(), kTokens, kChannels, 0}, options);
      EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << ImplName(impl) << " field " << field;
      EXPECT_NE(st.message().find(absl::StrCat("16383 at chunk ", field / kChannels, ", channel ",
                                               field % kChannels, " is past the grid")),
                absl::string_view::npos)
          << st;
    }
  }
}

TEST(ContainerFuzzTest, RandomEditsNeverCrashTheDecoder) {
  std::mt19937 rng(5);
  for (const char* scheme : kSchemes) {
    EncodedPage enc = Encode(scheme, 32, 8);
    for (int iter = 0; iter < 300; ++iter) {
      std::vector<uint8_t> b = enc.bytes;
      const int edits = 1 + rng() % 4;
      for (int e = 0; e < edits; ++e) b[rng() % b.size()] = static_cast<uint8_t>(rng());
      if (iter % 2 == 0 && ParseContainerHeader(b).ok()) Reseal(b);  // past the CRCs, into the payload checks
      if (iter % 3 == 0) b.resize(rng() % (b.size() + 1));
      std::vector<float> out(32 * 8);
      const absl::Status st = DecodePage(b, 1 + rng() % 3, MutablePageView{out.data(), 32, 8, 0});
      if (st.ok()) {
        for (float v : out) ASSERT_TRUE(std::isfinite(v)) << scheme;
      } else {
        EXPECT_TRUE(st.code() == absl::StatusCode::kDataLoss || st.code() == absl::StatusCode::kInvalidArgument)
            << st;
      }
    }
  }
}

}  // namespace
}  // namespace kvt::codec
