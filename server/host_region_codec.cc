#include "server/host_region_codec.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "common/status_macros.h"
#include "kv/kv_page_io.h"

namespace kvt::server {
namespace {

class HostRegionCodec final : public RegionCodec {
 public:
  HostRegionCodec(const Region& region, const RegionCodecOptions& options) : region_(region), options_(options) {}

  absl::StatusOr<EncodedLayer> EncodeLayer(absl::Span<const uint32_t> block_ids, absl::Span<const kv::PlannedPage> pages,
                                           const codec::Scheme& scheme, int chunk_tokens) override {
    std::vector<size_t> offset(pages.size() + 1, 0);
    for (size_t i = 0; i < pages.size(); ++i) offset[i + 1] = offset[i] + pages[i].total_bytes();
    std::shared_ptr<HostBuffer> buffer = options_.buffers->Acquire(offset.back(), HostMemory::kPageable);
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat("no memory for a %d-byte encoded layer", offset.back()));
    }
    codec::CodecOptions codec_options;
    codec_options.chunk_tokens = chunk_tokens;
    const kv::KvLayout& layout = region_.layout();
    const uint32_t channels = layout.spec().num_kv_heads * layout.spec().head_dim;
    std::vector<absl::Status> statuses(pages.size());
    std::vector<std::vector<absl::Span<const uint8_t>>> streams(pages.size());
    options_.workers->ParallelFor(pages.size(), [&](size_t i) {
      thread_local std::vector<float> scratch;
      const kv::PageSpec& spec = pages[i].spec;
      scratch.resize(static_cast<size_t>(spec.tokens) * channels);
      absl::Status s = kv::GatherPage(layout, region_.bytes(), block_ids, spec, absl::MakeSpan(scratch));
      absl::StatusOr<codec::ContainerLayout> encoded = absl::UnknownError("not encoded");
      if (s.ok()) {
        const codec::PageView view{scratch.data(), static_cast<int>(spec.tokens), static_cast<int>(channels)};
        const absl::Span<uint8_t> out(buffer->data() + offset[i], offset[i + 1] - offset[i]);
        encoded = codec::EncodePageInto(scheme, codec_options, view, out);
        s = encoded.status();
      }
      if (!s.ok()) {
        statuses[i] =
            absl::Status(s.code(), absl::StrFormat("layer %d %s page at token %d: %s", spec.layer,
                                                   spec.kind == 0 ? "K" : "V", spec.first_token, s.message()));
        return;
      }
      for (int k = 0; k < scheme.num_streams(); ++k) {
        streams[i].emplace_back(buffer->data() + offset[i] + encoded->stream_offset[k], encoded->stream_length[k]);
      }
    });
    for (const absl::Status& s : statuses) KVT_RETURN_IF_ERROR(s);
    return EncodedLayer(std::move(streams), std::move(buffer));
  }

  bool on_device() const override { return false; }
  HostMemory inbox_memory() const override { return HostMemory::kPageable; }
  size_t max_decode_batch() const override { return 1; }

  absl::Status DecodePages(absl::Span<const uint32_t> block_ids, absl::Span<const kv::PageSpec> pages,
                           absl::Span<const absl::Span<const uint8_t>> containers, int stages,
                           bool /*urgent*/) override {
    if (pages.size() != containers.size()) {
      return absl::InvalidArgumentError(absl::StrFormat("%d pages, %d containers", pages.size(), containers.size()));
    }
    const kv::KvLayoutSpec& dst = region_.layout().spec();
    const uint32_t heads = options_.source_heads > 0 ? options_.source_heads : dst.num_kv_heads;
    const uint32_t head_begin = options_.source_heads > 0 ? options_.source_head_begin : dst.head_begin;
    const size_t channels = static_cast<size_t>(heads) * dst.head_dim;
    for (size_t i = 0; i < pages.size(); ++i) {
      thread_local std::vector<float> values;
      values.resize(pages[i].tokens * channels);
      const codec::MutablePageView out{values.data(), static_cast<int>(pages[i].tokens), static_cast<int>(channels)};
      KVT_RETURN_IF_ERROR(codec::DecodePage(containers[i], stages, out));
      KVT_RETURN_IF_ERROR(
          kv::ScatterPage(region_.layout(), region_.bytes(), block_ids, pages[i], values, head_begin, heads));
    }
    return absl::OkStatus();
  }

 private:
  const Region& region_;
  const RegionCodecOptions options_;
};

}  // namespace

std::unique_ptr<RegionCodec> MakeHostRegionCodec(const Region& region, const RegionCodecOptions& options) {
  return std::make_unique<HostRegionCodec>(region, options);
}

}  // namespace kvt::server
