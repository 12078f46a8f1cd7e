#include "codec/container.h"

#include <cstring>
#include <limits>
#include <string>

#include "codec/codec.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kvt::codec {
namespace {

EncodedPage EncodeRamp(const char* scheme_name, int tokens, int channels) {
  std::vector<float> data(static_cast<size_t>(tokens) * channels);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 17) - 8.0f;
  absl::StatusOr<EncodedPage> enc =
      EncodePage(*ParseScheme(scheme_name), CodecOptions{}, PageView{data.data(), tokens, channels, 0});
  EXPECT_TRUE(enc.ok()) << enc.status();
  return *std::move(enc);
}

TEST(ContainerTest, HeaderParsesBackToTheEncodersLayout) {
  EncodedPage enc = EncodeRamp("lynx-a2r2r4", 64, 24);
  absl::StatusOr<ContainerLayout> got = ParseContainerHeader(enc.bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->scheme, enc.layout.scheme);
  EXPECT_EQ(got->tokens, 64);
  EXPECT_EQ(got->channels, 24);
  EXPECT_EQ(got->chunk_tokens, kLynxChunkTokens);  // the lynx family's own, as CodecOptions{} asks
  EXPECT_EQ(got->scheme.end_pair_bits, kDefaultEndPairBits);
  EXPECT_EQ(got->scheme.frame_spikes, kDefaultFrameSpikes);
  EXPECT_EQ(got->alpha, CodecOptions{}.alpha);
  EXPECT_EQ(got->top_width, CodecOptions{}.top_width);
  EXPECT_GT(got->top_width, 0.0f);
  EXPECT_EQ(got->stream_offset, enc.layout.stream_offset);
  EXPECT_EQ(got->stream_length, enc.layout.stream_length);
  EXPECT_EQ(got->stream_crc, enc.layout.stream_crc);
  EXPECT_EQ(got->total_bytes, enc.bytes.size());
}

TEST(ContainerTest, StreamsAreContiguousAndStreamZeroStartsWithTheHeader) {
  EncodedPage enc = EncodeRamp("lynx", 256, 64);
  EXPECT_EQ(enc.layout.stream_offset[0], 0u);
  EXPECT_EQ(enc.layout.stream_offset[1], enc.layout.stream_length[0]);
  // Header, lo/hi, 14-bit end pairs of 16 x 64 chunks, 3 frame spikes (f32 + u16) per channel, the 8-entry anchor
  // table, the anchor codes.
  EXPECT_EQ(enc.layout.stream_length[0],
            kContainerHeaderBytes + 8 * 64 + 16 * 64 * 14 / 8 + 6 * 3 * 64 + 4 * 8 + 256 * 64 / 2);
  EXPECT_EQ(enc.layout.stream_length[1], 256u * 64 / 2);
  uint32_t magic;
  std::memcpy(&magic, enc.stream(0).data(), 4);
  EXPECT_EQ(magic, kContainerMagic);
}

TEST(ContainerTest, StreamPayloadBytesFollowsTheDocumentedFormulas) {
  // Version 3's lynx metadata (23-bit end pairs, no frame spikes) at 32-token chunks.
  const Scheme lynx = *ParseScheme("lynx-a3r5+e23+f0"), spike = *ParseScheme("lynx+spike+e23");
  // lo, hi; 23-bit end pairs; one anchor table of 2^(3 - 1) f32 magnitudes; the anchor codes.
  EXPECT_EQ(StreamPayloadBytes(lynx, 0, 256, 1024, 32),
            8 * 1024 + (8 * 1024 * 23 + 7) / 8 + 4 * 4 + (256 * 1024 * 3 + 7) / 8);
  EXPECT_EQ(StreamPayloadBytes(lynx, 1, 256, 1024, 32), 256u * 1024 * 5 / 8);
  EXPECT_EQ(StreamPayloadBytes(spike, 0, 64, 10, 32), 8 * 10 + (20 * 23 + 7) / 8 + 5 * 20 + 4 * 8 + 64 * 10 / 2);
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("lynx-a2r2r4+e23+f0"), 0, 256, 1024, 32),
            8 * 1024 + (8 * 1024 * 23 + 7) / 8 + 4 * (2 + 8) + 256 * 1024 * 2 / 8);
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("lynx8+e23+f0"), 0, 256, 1024, 32),
            8 * 1024 + 8 * 1024 * 23 / 8 + 256u * 1024);
  // Version 4's defaults: 14-bit pairs of 16-token chunks, 3 frame spikes per channel.
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("lynx"), 0, 2048, 1024, 16),
            8 * 1024 + 128 * 1024 * 14 / 8 + 6 * 3 * 1024 + 4 * 8 + 2048 * 1024 / 2);
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("lynx+e13+f2"), 0, 3, 7, 16),  // 13-bit pairs; 2 spikes, below 3 tokens
            8 * 7 + (7 * 13 + 7) / 8 + 6 * 2 * 7 + 4 * 8 + (3 * 7 * 4 + 7) / 8);
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("lynx"), 0, 1, 7, 16), 8 * 7 + (7 * 14 + 7) / 8 + 4 * 8 + 4u);  // no room
  EXPECT_EQ(PageFrameSpikes(*ParseScheme("lynx"), 2, 16), 1);
  EXPECT_EQ(PageFrameSpikes(*ParseScheme("int8"), 256, 32), 0);
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("int4"), 0, 7, 3, 32), 4 * 3 + (21 * 4 + 7) / 8);
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("fp8"), 0, 2, 129, 32), 4 * 2 * 2 + 2 * 129);
  EXPECT_EQ(StreamPayloadBytes(*ParseScheme("bf16"), 0, 3, 5, 32), 30u);
  EXPECT_EQ(StreamPayloadBytes(lynx, 2, 256, 1024, 32), 0u);   // no such stream
  EXPECT_EQ(StreamPayloadBytes(lynx, 0, 48, 1024, 32), 0u);    // not a whole number of chunks
  EXPECT_EQ(StreamPayloadBytes(lynx, 0, 256, 0, 32), 0u);
}

TEST(ContainerTest, BadMagicVersionAndTruncatedHeadersAreInvalidArguments) {
  EncodedPage enc = EncodeRamp("int8", 32, 8);
  std::vector<uint8_t> b = enc.bytes;
  EXPECT_EQ(ParseContainerHeader(absl::MakeConstSpan(b).first(kContainerHeaderBytes - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  b[0] ^= 1;
  EXPECT_EQ(ParseContainerHeader(b).status().code(), absl::StatusCode::kInvalidArgument);
  b = enc.bytes;
  b[4] = 3;  // version 3: lynx's metadata had another layout
  const absl::Status old = ParseContainerHeader(b).status();
  EXPECT_EQ(old.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(old.message().find("re-encode"), std::string::npos) << old;
  b[4] = 5;
  EXPECT_EQ(ParseContainerHeader(b).status().code(), absl::StatusCode::kInvalidArgument);
}

// Rewrites the header's bytes [offset, offset + 4) to `value` and its CRC to match.
std::vector<uint8_t> WithHeaderWord(std::vector<uint8_t> b, size_t offset, uint32_t value) {
  std::memcpy(b.data() + offset, &value, 4);
  const uint32_t crc = Crc32c(b.data(), kContainerHeaderBytes - 4);
  std::memcpy(b.data() + kContainerHeaderBytes - 4, &crc, 4);
  return b;
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(ContainerTest, VersionTwoContainersAreRejectedAsInvalidArgumentsNamingTheVersion) {
  // Version 2 had no knee: its lynx codes mean other values, so a version 3 reader must not decode them.
  EncodedPage enc = EncodeRamp("lynx", 64, 8);
  std::vector<uint8_t> b = enc.bytes;
  b[4] = 2;
  const std::vector<uint8_t> v2 = WithHeaderWord(b, 96, FloatBits(0.0f));
  const absl::Status st = ParseContainerHeader(v2).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("version 2"), std::string::npos) << st;
}

TEST(ContainerTest, TheKneeTravelsInTheHeaderAndIsValidated) {
  constexpr size_t kOffTopWidth = 96;  // docs/FORMAT.md
  EncodedPage lynx = EncodeRamp("lynx", 64, 8);
  for (float w : {0.0f, kMinTopWidth, 0.1f, kMaxTopWidth}) {
    absl::StatusOr<ContainerLayout> got = ParseContainerHeader(WithHeaderWord(lynx.bytes, kOffTopWidth, FloatBits(w)));
    ASSERT_TRUE(got.ok()) << w << ": " << got.status();
    EXPECT_EQ(got->top_width, w);
  }
  for (float w : {-0.0f, -0.1f, 0.01f, 0.13f, 1.0f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    const absl::Status st = ParseContainerHeader(WithHeaderWord(lynx.bytes, kOffTopWidth, FloatBits(w))).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << w;
    EXPECT_NE(st.message().find("top_width"), std::string::npos) << st;
  }
  // lynx4's 4-bit codes have no knee: its pages say 0 whatever the options.
  EXPECT_EQ(ParseContainerHeader(EncodeRamp("lynx4", 64, 8).bytes).value().top_width, 0.0f);
  // A scheme without a curve must leave the field zero.
  EncodedPage int8 = EncodeRamp("int8", 64, 8);
  EXPECT_EQ(ParseContainerHeader(int8.bytes).value().top_width, 0.0f);
  const absl::Status st = ParseContainerHeader(WithHeaderWord(int8.bytes, kOffTopWidth, FloatBits(0.1f))).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("top_width"), std::string::npos) << st;
}

TEST(ContainerTest, VersionOneContainersAreRejectedAsInvalidArgumentsNamingTheVersion) {
  // A version 1 container (8-bit mu / sigma lynx metadata) with a valid header CRC: rejected, not misread.
  EncodedPage enc = EncodeRamp("lynx", 64, 8);
  std::vector<uint8_t> b = enc.bytes;
  b[4] = 1;
  b[5] = 0;
  const uint32_t crc = Crc32c(b.data(), kContainerHeaderBytes - 4);
  std::memcpy(b.data() + kContainerHeaderBytes - 4, &crc, 4);
  const absl::Status st = ParseContainerHeader(b).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("version 1"), std::string::npos) << st;
}

TEST(ContainerTest, HeaderFieldFlipsFailTheHeaderCrc) {
  EncodedPage enc = EncodeRamp("lynx", 64, 8);
  for (size_t i = 6; i < kContainerHeaderBytes; ++i) {
    std::vector<uint8_t> b = enc.bytes;
    b[i] ^= 0x10;
    EXPECT_EQ(ParseContainerHeader(b).status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
  }
}

TEST(ContainerTest, ConsistentButWrongFieldsAreInvalidArgumentsEvenWithAGoodCrc) {
  EncodedPage enc = EncodeRamp("lynx", 64, 8);
  auto rewrite = [&](auto mutate) {
    ContainerLayout l = enc.layout;
    mutate(l);
    std::vector<uint8_t> b = enc.bytes;
    WriteContainerHeader(l, b.data());
    return ParseContainerHeader(b).status().code();
  };
  // Dims that disagree with the stream lengths written for the real dims.
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.tokens = 32; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.channels = 9; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.chunk_tokens = 0; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.alpha = -2.0f; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.stream_length[1] += 1; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.scheme.stage_bits = {4, 5}; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.flags = 0x80; }), absl::StatusCode::kInvalidArgument);
  // Version 4's fields: the end pair width in range and matching the lengths, the frame spikes too, and neither
  // on a scheme without them.
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.scheme.end_pair_bits = 7; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.scheme.end_pair_bits = 24; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.scheme.end_pair_bits = 15; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.flags = 2 << kFlagFrameSpikesShift; }),
            absl::StatusCode::kInvalidArgument);  // 2 frame spikes where the lengths hold 3
  EXPECT_EQ(rewrite([](ContainerLayout& l) { l.flags |= kFlagSpikeReserve; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewrite([](ContainerLayout&) {}), absl::StatusCode::kOk);
  EncodedPage int8 = EncodeRamp("int8", 64, 8);
  for (auto mutate : {+[](ContainerLayout& l) { l.scheme.end_pair_bits = 14; },
                      +[](ContainerLayout& l) { l.flags = 3 << kFlagFrameSpikesShift; }}) {
    ContainerLayout l = int8.layout;
    mutate(l);
    std::vector<uint8_t> b = int8.bytes;
    WriteContainerHeader(l, b.data());
    EXPECT_EQ(ParseContainerHeader(b).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvt::codec
