#include "tools/kvtctl/timeline_svg.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvt::kvtctl {
namespace {

// Page geometry, in SVG user units (pixels).
constexpr double kWidth = 960;
constexpr double kPlotLeft = 150;  // series labels and layer numbers go left of this
constexpr double kPlotRight = kWidth - 30;
constexpr double kTitleY = 28;
constexpr double kLegendY = 52;
constexpr double kGroupsTop = 76;
constexpr double kGroupHeader = 18;  // the series label line above a group's rows
constexpr double kGroupGap = 14;
constexpr double kAxisHeight = 50;  // tick labels and the axis caption below the plot

constexpr char kAnchorColour[] = "#1f77b4";
constexpr char kFullColour[] = "#ff7f0e";
constexpr char kDoneColour[] = "#d62728";
constexpr char kGridColour[] = "#e4e4e4";
constexpr char kJoinColour[] = "#b0b0b0";
constexpr char kStageColour[] = "#8c9fbf";
constexpr double kStageRow = 11;     // height of one stage bar's row
constexpr double kPanelHeader = 26;  // a panel's heading above its groups

std::string Escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::optional<double> Finite(const std::optional<double>& t) {
  if (t.has_value() && std::isfinite(*t)) return t;
  return std::nullopt;
}

// The time axis: [lo, hi] in ms, cut by `step` into round ticks (1, 2 or 5 times a power of ten).
struct TimeAxis {
  double lo = 0;
  double hi = 1;
  double step = 1;

  double X(double ms) const { return kPlotLeft + (ms - lo) / (hi - lo) * (kPlotRight - kPlotLeft); }
};

// An axis from min(0, earliest) to at least the latest of all finite times, with about 8 ticks.
TimeAxis MakeAxis(absl::Span<const TimelineSeries> series) {
  double lo = 0;
  double hi = 0;
  auto take = [&](const std::optional<double>& t) {
    if (!Finite(t)) return;
    lo = std::min(lo, *t);
    hi = std::max(hi, *t);
  };
  for (const TimelineSeries& s : series) {
    take(s.done_ms);
    for (const LayerTimes& l : s.layers) {
      take(l.anchor_ms);
      take(l.full_ms);
    }
    for (const StageSpan& st : s.stages) {
      take(st.begin_ms);
      take(st.end_ms);
    }
  }
  if (hi - lo <= 0) hi = lo + 1;
  const double raw_step = (hi - lo) / 8;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
  const double normalized = raw_step / magnitude;
  const double step = (normalized <= 1 ? 1 : normalized <= 2 ? 2 : normalized <= 5 ? 5 : 10) * magnitude;
  TimeAxis axis;
  axis.step = step;
  axis.lo = std::floor(lo / step) * step;
  axis.hi = std::ceil(hi / step) * step;
  if (axis.hi < hi) axis.hi += step;  // guard against rounding in the division
  return axis;
}

std::string Ms(double ms) { return absl::StrFormat("%.3f ms", ms); }

// Legend entries: a circle, a square and a dashed line, each with its meaning.
void AppendLegend(std::string& svg) {
  const double y = kLegendY;
  absl::StrAppendFormat(&svg,
                        "<g class=\"legend\" font-size=\"12\">\n"
                        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>"
                        "<text x=\"%.1f\" y=\"%.1f\">anchor arrived</text>\n"
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"%s\"/>"
                        "<text x=\"%.1f\" y=\"%.1f\">full KV arrived</text>\n"
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                        "stroke-width=\"1.5\" stroke-dasharray=\"4,3\"/>"
                        "<text x=\"%.1f\" y=\"%.1f\">transfer done</text>\n"
                        "</g>\n",
                        kPlotLeft + 4, y - 4, kAnchorColour, kPlotLeft + 12, y,   //
                        kPlotLeft + 130, y - 8, kFullColour, kPlotLeft + 142, y,  //
                        kPlotLeft + 260, y - 11, kPlotLeft + 260, y + 2, kDoneColour, kPlotLeft + 268, y);
}

// Draws one series' rows from `top`; returns the y just below them.
double AppendGroup(std::string& svg, const TimelineSeries& series, const TimeAxis& axis, double top) {
  std::vector<LayerTimes> layers = series.layers;
  std::stable_sort(layers.begin(), layers.end(),
                   [](const LayerTimes& a, const LayerTimes& b) { return a.layer < b.layer; });
  const size_t rows = std::max<size_t>(layers.size(), 1);
  const double pitch = std::clamp(320.0 / rows, 4.0, 12.0);
  const double mark = std::min(3.5, pitch * 0.4);  // circle radius, half the square's side
  const size_t label_every = static_cast<size_t>(std::ceil(11.0 / pitch));
  const double rows_top = top + kGroupHeader;
  const double bottom = rows_top + rows * pitch;
  const std::string label = Escape(series.label);

  std::string header = label;
  if (Finite(series.done_ms)) absl::StrAppend(&header, " \xE2\x80\x94 done at ", Escape(Ms(*series.done_ms)));
  absl::StrAppendFormat(&svg,
                        "<g class=\"series\">\n<text x=\"10\" y=\"%.1f\" font-size=\"13\" "
                        "font-weight=\"bold\">%s</text>\n",
                        top + 13, header);
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"#999999\" stroke-width=\"0.5\"/>\n",
                        kPlotLeft, rows_top, kPlotRight - kPlotLeft, bottom - rows_top);
  if (bottom - rows_top >= 40) {
    const double mid = (rows_top + bottom) / 2;
    absl::StrAppendFormat(
        &svg,
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#666666\" text-anchor=\"middle\" "
        "transform=\"rotate(-90 %.1f %.1f)\">layer</text>\n",
        kPlotLeft - 30, mid, kPlotLeft - 30, mid);
  }
  if (layers.empty()) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#666666\">"
                          "(no layer events)</text>\n",
                          kPlotLeft + 6, rows_top + pitch - 2);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerTimes& l = layers[i];
    const double y = rows_top + (i + 0.5) * pitch;
    const std::string what = absl::StrCat(label, " layer ", l.layer);
    if (i % label_every == 0) {
      absl::StrAppendFormat(&svg,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">%d</text>\n",
                            kPlotLeft - 4, y + 3, l.layer);
    }
    const std::optional<double> anchor = Finite(l.anchor_ms);
    const std::optional<double> full = Finite(l.full_ms);
    if (anchor && full) {
      absl::StrAppendFormat(&svg,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                            "stroke-width=\"1\"/>\n",
                            axis.X(*anchor), y, axis.X(*full), y, kJoinColour);
    }
    if (anchor) {
      absl::StrAppendFormat(&svg,
                            "<circle class=\"anchor\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\">"
                            "<title>%s anchor at %s</title></circle>\n",
                            axis.X(*anchor), y, mark, kAnchorColour, what, Ms(*anchor));
    }
    if (full) {
      absl::StrAppendFormat(&svg,
                            "<rect class=\"full\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                            "fill=\"%s\"><title>%s full at %s</title></rect>\n",
                            axis.X(*full) - mark, y - mark, 2 * mark, 2 * mark, kFullColour, what, Ms(*full));
    }
  }
  double stages_bottom = bottom;
  for (size_t i = 0; i < series.stages.size(); ++i) {
    const StageSpan& st = series.stages[i];
    if (!Finite(st.begin_ms) || !Finite(st.end_ms)) continue;
    const double y = bottom + 4 + i * kStageRow;
    const double x0 = axis.X(st.begin_ms), x1 = std::max(axis.X(st.end_ms), x0 + 1.5);
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\" fill=\"#555555\">%s</text>\n"
                          "<rect class=\"stage\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                          "<title>%s: %s to %s, busy %s</title></rect>\n",
                          kPlotLeft - 4, y + kStageRow - 3, Escape(st.label), x0, y + 1, x1 - x0, kStageRow - 3,
                          kStageColour, Escape(absl::StrCat(series.label, " ", st.label)), Ms(st.begin_ms),
                          Ms(st.end_ms), Ms(st.busy_ms));
    stages_bottom = y + kStageRow;
  }
  if (Finite(series.done_ms)) {
    const double x = axis.X(*series.done_ms);
    absl::StrAppendFormat(
        &svg,
        "<line class=\"done\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"4,3\"><title>%s done at %s</title></line>\n",
        x, rows_top - 3, x, bottom + 3, kDoneColour, label, Ms(*series.done_ms));
  }
  svg += "</g>\n";
  return stages_bottom;
}

// Vertical grid lines from `top` to `bottom`, and the tick labels and caption below `bottom`.
void AppendAxis(std::string& svg, const TimeAxis& axis, double top, double bottom) {
  svg += "<g class=\"axis\" font-size=\"11\">\n";
  const int ticks = static_cast<int>(std::llround((axis.hi - axis.lo) / axis.step));
  for (int i = 0; i <= ticks; ++i) {
    double ms = axis.lo + i * axis.step;
    if (std::abs(ms) < axis.step * 1e-9) ms = 0;
    const double x = axis.X(ms);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"1\"/>\n"
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\"/>\n"
                          "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
                          x, top, x, bottom, kGridColour, x, bottom, x, bottom + 5, x, bottom + 18, ms);
  }
  absl::StrAppendFormat(
      &svg,
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\"/>\n"
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time since transfer start (ms)</text>\n"
      "</g>\n",
      kPlotLeft, bottom, kPlotRight, bottom, (kPlotLeft + kPlotRight) / 2, bottom + 38);
}

}  // namespace

namespace {

// Draws one panel's groups (and its heading, if any) from `top`, over its own axis; returns the y below its axis.
double AppendPanel(std::string& svg, const TimelinePanel& panel, double top) {
  const TimeAxis axis = MakeAxis(panel.series);
  double groups_top = top;
  if (!panel.title.empty()) {
    absl::StrAppendFormat(&svg, "<text x=\"10\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", top + 16,
                          Escape(panel.title));
    groups_top += kPanelHeader;
  }
  // The groups first (their height decides the grid's), then the grid before them in the document, so that the
  // marks are drawn over it.
  std::string groups;
  double bottom = groups_top;
  for (size_t i = 0; i < panel.series.size(); ++i) {
    if (i > 0) bottom += kGroupGap;
    bottom = AppendGroup(groups, panel.series[i], axis, bottom);
  }
  if (panel.series.empty()) {
    groups += absl::StrFormat(
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" fill=\"#666666\">"
        "no transfers to draw</text>\n",
        kPlotLeft, groups_top + 20);
    bottom = groups_top + 40;
  }
  AppendAxis(svg, axis, groups_top, bottom);
  svg += groups;
  return bottom + kAxisHeight;
}

std::string Page(const std::string& body, double height, const std::string& title) {
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
      "<title>%s</title>\n"
      "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n"
      "<text x=\"%.1f\" y=\"%.1f\" font-size=\"16\" font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
      kWidth, height, kWidth, height, Escape(title), kWidth, height, kWidth / 2, kTitleY, Escape(title));
  AppendLegend(svg);
  svg += body;
  svg += "</svg>\n";
  return svg;
}

}  // namespace

std::string RenderTimelineSvg(absl::Span<const TimelineSeries> series, const std::string& title) {
  const TimelinePanel panel{"", std::vector<TimelineSeries>(series.begin(), series.end())};
  std::string body;
  const double height = AppendPanel(body, panel, kGroupsTop);
  return Page(body, height, title);
}

std::string RenderTimelinePanelsSvg(absl::Span<const TimelinePanel> panels, const std::string& title) {
  std::string body;
  double bottom = kGroupsTop;
  for (const TimelinePanel& p : panels) bottom = AppendPanel(body, p, bottom) + kGroupGap;
  return Page(body, bottom, title);
}

namespace {

absl::Status WriteFile(const std::string& path, const std::string& svg) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create timeline SVG ", path));
  if (std::fwrite(svg.data(), 1, svg.size(), file.get()) != svg.size() || std::fflush(file.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write timeline SVG ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteTimelinePanelsSvg(const std::string& path, absl::Span<const TimelinePanel> panels,
                                    const std::string& title) {
  return WriteFile(path, RenderTimelinePanelsSvg(panels, title));
}

absl::Status WriteTimelineSvg(const std::string& path, absl::Span<const TimelineSeries> series,
                              const std::string& title) {
  return WriteFile(path, RenderTimelineSvg(series, title));
}

}  // namespace kvt::kvtctl
