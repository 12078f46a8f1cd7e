#include "codec/gpu/host_containers.h"

#include <cstring>
#include <vector>

#include "codec/codec.h"
#include "codec/container.h"
#include "codec/test_pages.h"
#include "gtest/gtest.h"

namespace kvt::codec::gpu {
namespace {

// Encodes pages with the CPU codec (the reference containers).
std::vector<EncodedPage> Reference(const Scheme& scheme, int num_pages, int tokens, int channels) {
  std::vector<EncodedPage> out;
  for (int p = 0; p < num_pages; ++p) {
    const TestPage page = RealisticPage(tokens, channels, 100 + p);
    absl::StatusOr<EncodedPage> enc = EncodePage(scheme, CodecOptions{}, page.view());
    EXPECT_TRUE(enc.ok()) << enc.status();
    out.push_back(*std::move(enc));
  }
  return out;
}

// Copies each reference container's payload (all but its header) into `host`, as the device copy does.
void FillPayloads(const std::vector<EncodedPage>& ref, HostContainers& host) {
  for (int p = 0; p < host.num_pages(); ++p) {
    const size_t h = ref[p].layout.header_bytes;
    std::memcpy(host.data(p) + h, ref[p].bytes.data() + h, ref[p].bytes.size() - h);
  }
}

class HostContainersTest : public testing::TestWithParam<const char*> {};

TEST_P(HostContainersTest, SealedPagesAreTheCpuCodecsContainersByteForByte) {
  const Scheme scheme = *ParseScheme(GetParam());
  const std::vector<EncodedPage> ref = Reference(scheme, 3, 64, 40);
  HostContainers host(/*pinned=*/true);  // pageable where no CUDA device can pin memory: the same bytes
  ASSERT_TRUE(host.Reset(ref[0].layout, 3).ok());
  ASSERT_EQ(host.container_bytes(), ref[0].bytes.size());
  FillPayloads(ref, host);
  for (int p = 0; p < 3; ++p) host.Seal(p);
  for (int p = 0; p < 3; ++p) {
    SCOPED_TRACE(p);
    const absl::Span<const uint8_t> c = host.container(p);
    EXPECT_EQ(std::vector<uint8_t>(c.begin(), c.end()), ref[p].bytes);
    for (int s = 0; s < scheme.num_streams(); ++s) {
      EXPECT_EQ(host.stream(p, s).data(), c.data() + ref[p].layout.stream_offset[s]);
      EXPECT_EQ(host.stream(p, s).size(), ref[p].stream(s).size());
      EXPECT_EQ(host.layout(p).stream_crc[s], ref[p].layout.stream_crc[s]);
    }
    absl::StatusOr<ContainerLayout> parsed = ParseContainerHeader(c);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->stream_crc, ref[p].layout.stream_crc);
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, HostContainersTest,
                         testing::Values("bf16", "int8", "int4", "fp8", "lynx", "lynx-a2r2r4", "lynx8"));

TEST(HostContainers, APayloadChangedAfterSealingFailsItsCrcUntilSealedAgain) {
  const Scheme scheme = *ParseScheme("lynx");
  const std::vector<EncodedPage> ref = Reference(scheme, 2, 64, 16);
  HostContainers host(/*pinned=*/false);
  ASSERT_TRUE(host.Reset(ref[0].layout, 2).ok());
  FillPayloads(ref, host);
  host.Seal(0);
  host.Seal(1);
  std::vector<float> out(64 * 16);
  const MutablePageView view{out.data(), 64, 16, 0};
  ASSERT_TRUE(DecodePage(host.container(1), 2, view).ok());
  host.data(1)[host.shape().stream_offset[1] + 5] ^= 0x10;  // a residual code, after sealing
  EXPECT_EQ(DecodePage(host.container(1), 1, view).code(), absl::StatusCode::kOk);  // the anchor is intact
  EXPECT_EQ(DecodePage(host.container(1), 2, view).code(), absl::StatusCode::kDataLoss);
  host.Seal(1);
  EXPECT_TRUE(DecodePage(host.container(1), 2, view).ok());
  EXPECT_TRUE(DecodePage(host.container(0), 2, view).ok());  // page 0 untouched by page 1's sealing
}

TEST(HostContainers, ResetKeepsALargeEnoughBufferAndGrowsASmallOne) {
  const Scheme lynx = *ParseScheme("lynx");
  const std::vector<EncodedPage> big = Reference(lynx, 1, 256, 64);
  const std::vector<EncodedPage> small = Reference(*ParseScheme("int4"), 1, 32, 8);
  HostContainers host(/*pinned=*/false);
  ASSERT_TRUE(host.Reset(big[0].layout, 4).ok());
  const size_t capacity = host.capacity();
  EXPECT_EQ(capacity, 4 * big[0].bytes.size());
  const uint8_t* base = host.data(0);
  ASSERT_TRUE(host.Reset(small[0].layout, 7).ok());
  EXPECT_EQ(host.capacity(), capacity);
  EXPECT_EQ(host.data(0), base);
  EXPECT_EQ(host.num_pages(), 7);
  EXPECT_EQ(host.container_bytes(), small[0].bytes.size());
  EXPECT_EQ(host.layout(6).stream_crc[0], 0u);  // unsealed after Reset
  ASSERT_TRUE(host.Reset(big[0].layout, 5).ok());
  EXPECT_EQ(host.capacity(), 5 * big[0].bytes.size());
}

TEST(HostContainers, ResetRejectsNoPagesAndShapesTheFormatCannotHold) {
  const std::vector<EncodedPage> ref = Reference(*ParseScheme("lynx"), 1, 64, 16);
  HostContainers host(/*pinned=*/false);
  EXPECT_EQ(host.Reset(ref[0].layout, 0).code(), absl::StatusCode::kInvalidArgument);
  ContainerLayout bad = ref[0].layout;
  bad.tokens = 0;
  EXPECT_EQ(host.Reset(bad, 1).code(), absl::StatusCode::kInvalidArgument);
  bad = ref[0].layout;
  bad.tokens = 40;  // not a whole number of 16-token chunks
  EXPECT_EQ(host.Reset(bad, 1).code(), absl::StatusCode::kInvalidArgument);
  bad = ref[0].layout;
  bad.scheme.stage_bits[1] = 7;  // 4 + 7 bits: not a lynx split
  EXPECT_EQ(host.Reset(bad, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(host.num_pages(), 0);  // nothing half-made
  EXPECT_EQ(host.capacity(), 0u);
}

TEST(HostContainers, OverCallerMemoryTheyLandInItAndRefuseABatchThatDoesNotFit) {
  const Scheme scheme = *ParseScheme("lynx");
  const std::vector<EncodedPage> ref = Reference(scheme, 2, 64, 16);
  std::vector<uint8_t> memory(2 * ref[0].bytes.size() + 10, 0x5A);
  HostContainers host(absl::MakeSpan(memory).subspan(5, 2 * ref[0].bytes.size()), /*pinned=*/false);
  EXPECT_FALSE(host.pinned());
  ASSERT_TRUE(host.Reset(ref[0].layout, 2).ok());
  EXPECT_EQ(host.data(0), memory.data() + 5);
  FillPayloads(ref, host);
  host.Seal(0);
  host.Seal(1);
  const absl::Span<const uint8_t> c = host.container(1);
  EXPECT_EQ(std::vector<uint8_t>(c.begin(), c.end()), ref[1].bytes);
  EXPECT_EQ(memory[4], 0x5A);
  EXPECT_EQ(memory[memory.size() - 5], 0x5A);
  EXPECT_EQ(host.Reset(ref[0].layout, 3).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(host.data(0), memory.data() + 5);  // still the caller's memory, never a new allocation
}

}  // namespace
}  // namespace kvt::codec::gpu
