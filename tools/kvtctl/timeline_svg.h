// Draws per-layer KV arrival times of one or more transfers as a standalone SVG 1.1 picture, for
// `kvtctl timeline` (docs/DAEMON.md, "Where the time goes"): when each layer's anchor and its full KV arrived
// at the decode side. Plain functions, thread-safe.
//   WriteTimelineSvg("/tmp/t.svg", {lynx_series, baseline_series}, "Llama-3-8B, 4k tokens");
#ifndef KVT_TOOLS_KVTCTL_TIMELINE_SVG_H_
#define KVT_TOOLS_KVTCTL_TIMELINE_SVG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kvt::kvtctl {

// Per-layer arrival times of one transfer, as the decode daemon's events report them. Times are milliseconds
// since the transfer started; a missing time (the stream has not arrived, or the event was lost) draws no
// mark.
struct LayerTimes {
  uint32_t layer = 0;
  std::optional<double> anchor_ms;
  std::optional<double> full_ms;
};

// When one pipeline stage ran during a transfer (from a daemon's Profile): a bar from its first start to its
// last end, with its busy time in the bar's tooltip.
struct StageSpan {
  std::string label;  // e.g. "decode: anchor decode"
  double begin_ms = 0;
  double end_ms = 0;
  double busy_ms = 0;
};

// One transfer to draw, e.g. one codec scheme's run.
struct TimelineSeries {
  std::string label;  // e.g. the scheme, "lynx"
  std::vector<LayerTimes> layers;
  std::optional<double> done_ms;  // when the transfer completed, if it did
  std::vector<StageSpan> stages;  // drawn as bars under the layers' rows (none: no bars)
};

// Series that share a time axis, under a heading of their own (e.g. the runs at one link rate).
struct TimelinePanel {
  std::string title;
  std::vector<TimelineSeries> series;
};

// Returns an SVG 1.1 document: `title` on top, a legend, then one row group per series (its label, one row
// per layer, sorted by layer number) over a common time axis in milliseconds with ticks and grid lines. Each
// layer with an anchor time gets a circle (class "anchor"), each with a full time a square (class "full"),
// joined by a grey line when both are known; each series with a done time gets a dashed vertical line (class
// "done"). Marks carry a <title> that browsers show on hover. Text is XML-escaped. Non-finite times count as
// missing. An empty `series` gives a picture that says there is no data.
std::string RenderTimelineSvg(absl::Span<const TimelineSeries> series, const std::string& title);

// Panels one under the other, each with its own time axis (so a 50 Gbit/s run is not squashed beside a 1 Gbit/s
// one), under one `title`. Drawn as RenderTimelineSvg draws its series; each series' stage spans as bars (class
// "stage") under its rows.
std::string RenderTimelinePanelsSvg(absl::Span<const TimelinePanel> panels, const std::string& title);
absl::Status WriteTimelinePanelsSvg(const std::string& path, absl::Span<const TimelinePanel> panels,
                                    const std::string& title);

// Writes RenderTimelineSvg(series, title) to `path`, replacing the file. On failure the status has the
// errno's canonical code and a message with `path` and strerror.
absl::Status WriteTimelineSvg(const std::string& path, absl::Span<const TimelineSeries> series,
                              const std::string& title);

}  // namespace kvt::kvtctl

#endif  // KVT_TOOLS_KVTCTL_TIMELINE_SVG_H_
