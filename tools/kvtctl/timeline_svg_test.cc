#include "tools/kvtctl/timeline_svg.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace kvt::kvtctl {
namespace {

size_t Count(absl::string_view text, absl::string_view needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != absl::string_view::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The numbers inside every `<tag ...>NUMBER<` that starts with `open`, e.g. the tick labels.
std::vector<double> NumbersAfter(const std::string& svg, const std::string& open) {
  std::vector<double> numbers;
  for (size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const size_t start = svg.find('>', at) + 1;
    const size_t end = svg.find('<', start);
    double value = 0;
    if (absl::SimpleAtod(absl::string_view(svg).substr(start, end - start), &value)) numbers.push_back(value);
  }
  return numbers;
}

// The value of every `attribute="NUMBER"` in elements that start with `open`.
std::vector<double> AttributeValues(const std::string& svg, const std::string& open,
                                    absl::string_view attribute) {
  std::vector<double> values;
  const std::string key = absl::StrCat(" ", attribute, "=\"");
  for (size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const size_t start = svg.find(key, at) + key.size();
    const size_t end = svg.find('"', start);
    double value = 0;
    if (absl::SimpleAtod(absl::string_view(svg).substr(start, end - start), &value)) values.push_back(value);
  }
  return values;
}

TimelineSeries Lynx() {
  TimelineSeries s;
  s.label = "lynx";
  s.layers = {{0, 1.5, 4.0}, {1, 2.0, std::nullopt}, {2, std::nullopt, std::nullopt}, {3, 2.5, 9.25}};
  s.done_ms = 9.5;
  return s;
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(RenderTimelineSvgTest, IsOneSvgDocument) {
  const std::string svg = RenderTimelineSvg({Lynx()}, "one transfer");
  EXPECT_TRUE(absl::StartsWith(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"")) << svg;
  EXPECT_TRUE(absl::EndsWith(svg, "</svg>\n")) << svg;
  EXPECT_EQ(Count(svg, "<svg"), 1);
  EXPECT_EQ(Count(svg, "</svg>"), 1);
  EXPECT_EQ(Count(svg, "<g"), Count(svg, "</g>")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, ">one transfer</text>")) << svg;
}

TEST(RenderTimelineSvgTest, DrawsOneMarkPerKnownTime) {
  const std::string svg = RenderTimelineSvg({Lynx()}, "t");
  EXPECT_EQ(Count(svg, "class=\"anchor\""), 3) << svg;  // layers 0, 1, 3
  EXPECT_EQ(Count(svg, "class=\"full\""), 2) << svg;    // layers 0, 3
  EXPECT_EQ(Count(svg, "class=\"done\""), 1) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "<title>lynx layer 3 full at 9.250 ms</title>")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "anchor arrived")) << svg;  // legend
  EXPECT_TRUE(absl::StrContains(svg, "full KV arrived")) << svg;
}

TEST(RenderTimelineSvgTest, DrawsEverySeriesWithItsOwnDoneLine) {
  TimelineSeries baseline;
  baseline.label = "raw";
  baseline.layers = {{0, std::nullopt, 20.0}, {1, std::nullopt, 30.0}};
  baseline.done_ms = 31.0;
  TimelineSeries unfinished = Lynx();
  unfinished.label = "lynx (cut off)";
  unfinished.done_ms.reset();

  const std::string svg = RenderTimelineSvg({Lynx(), baseline, unfinished}, "compare");
  EXPECT_EQ(Count(svg, "class=\"series\""), 3) << svg;
  EXPECT_EQ(Count(svg, "class=\"anchor\""), 6) << svg;
  EXPECT_EQ(Count(svg, "class=\"full\""), 6) << svg;
  EXPECT_EQ(Count(svg, "class=\"done\""), 2) << svg;
}

TEST(RenderTimelineSvgTest, AxisCoversTheLatestTimeAndMarksStayInsideThePlot) {
  TimelineSeries slow = Lynx();
  slow.layers.push_back({7, 3.0, 123.4});
  slow.done_ms = 120.0;
  const std::string svg = RenderTimelineSvg({slow}, "t");

  const std::vector<double> ticks = NumbersAfter(svg, "<text class=\"tick\"");
  ASSERT_GE(ticks.size(), 3u) << svg;
  EXPECT_EQ(ticks.front(), 0);
  EXPECT_GE(ticks.back(), 123.4);
  EXPECT_LT(ticks.back(), 2 * 123.4);  // round, not wasteful
  for (size_t i = 1; i < ticks.size(); ++i) EXPECT_GT(ticks[i], ticks[i - 1]);

  // The rightmost tick's grid line is the plot's right edge; no mark lies past it or left of the 0 tick.
  const std::vector<double> tick_x = AttributeValues(svg, "<text class=\"tick\"", "x");
  ASSERT_EQ(tick_x.size(), ticks.size());
  const std::vector<double> anchor_x = AttributeValues(svg, "<circle class=\"anchor\"", "cx");
  ASSERT_EQ(anchor_x.size(), 4u);
  for (double x : anchor_x) {
    EXPECT_GE(x, tick_x.front());
    EXPECT_LE(x, tick_x.back());
  }
  const std::vector<double> done_x = AttributeValues(svg, "<line class=\"done\"", "x1");
  ASSERT_EQ(done_x.size(), 1u);
  const double px_per_ms = (tick_x.back() - tick_x.front()) / (ticks.back() - ticks.front());
  EXPECT_NEAR(done_x[0], tick_x.front() + (120.0 - ticks.front()) * px_per_ms, 0.1);
}

TEST(RenderTimelineSvgTest, NegativeTimesExtendTheAxisLeftOfZero) {
  TimelineSeries early;
  early.label = "clock skew";
  early.layers = {{0, -2.0, 5.0}};
  const std::vector<double> ticks = NumbersAfter(RenderTimelineSvg({early}, "t"), "<text class=\"tick\"");
  ASSERT_FALSE(ticks.empty());
  EXPECT_LE(ticks.front(), -2.0);
  EXPECT_GE(ticks.back(), 5.0);
}

TEST(RenderTimelineSvgTest, EscapesLabelsAndTitle) {
  TimelineSeries s = Lynx();
  s.label = "a<b & \"c\">";
  const std::string svg = RenderTimelineSvg({s}, "K&V <draft>");
  EXPECT_TRUE(absl::StrContains(svg, "a&lt;b &amp; &quot;c&quot;&gt;")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "K&amp;V &lt;draft&gt;")) << svg;
  EXPECT_FALSE(absl::StrContains(svg, "a<b")) << svg;
  EXPECT_FALSE(absl::StrContains(svg, "<draft>")) << svg;
  EXPECT_FALSE(absl::StrContains(svg, "& ")) << svg;
}

TEST(RenderTimelineSvgTest, NoSeriesSaysThereIsNoData) {
  const std::string svg = RenderTimelineSvg({}, "empty");
  EXPECT_TRUE(absl::StartsWith(svg, "<svg")) << svg;
  EXPECT_TRUE(absl::EndsWith(svg, "</svg>\n")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "no transfers to draw")) << svg;
  EXPECT_EQ(Count(svg, "class=\"anchor\""), 0);
}

TEST(RenderTimelineSvgTest, SeriesWithoutTimesDrawsNoMarks) {
  TimelineSeries nothing;
  nothing.label = "stalled";
  nothing.layers = {{0, std::nullopt, std::nullopt}, {1, std::nan(""), std::nullopt}};
  TimelineSeries no_layers;
  no_layers.label = "never started";

  const std::string svg = RenderTimelineSvg({nothing, no_layers}, "t");
  EXPECT_EQ(Count(svg, "class=\"anchor\""), 0) << svg;
  EXPECT_EQ(Count(svg, "class=\"full\""), 0) << svg;
  EXPECT_EQ(Count(svg, "class=\"done\""), 0) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "(no layer events)")) << svg;
  EXPECT_FALSE(absl::StrContains(svg, "nan")) << svg;
}

TEST(RenderTimelineSvgTest, LayersAreDrawnInLayerOrder) {
  TimelineSeries s;
  s.label = "shuffled";
  s.layers = {{2, 3.0, std::nullopt}, {0, 1.0, std::nullopt}, {1, 2.0, std::nullopt}};
  const std::vector<double> cy =
      AttributeValues(RenderTimelineSvg({s}, "t"), "<circle class=\"anchor\"", "cy");
  ASSERT_EQ(cy.size(), 3u);
  EXPECT_LT(cy[0], cy[1]);
  EXPECT_LT(cy[1], cy[2]);
}

TEST(WriteTimelineSvgTest, WritesWhatRenderReturns) {
  const std::string path = TempDir() + "/timeline.svg";
  ASSERT_TRUE(WriteTimelineSvg(path, {Lynx()}, "written").ok());
  std::ifstream in(path, std::ios::binary);
  std::stringstream read;
  read << in.rdbuf();
  EXPECT_EQ(read.str(), RenderTimelineSvg({Lynx()}, "written"));
}

TEST(WriteTimelineSvgTest, MissingDirectoryIsNotFoundAndNamesThePath) {
  const std::string path = TempDir() + "/no-such-dir/timeline.svg";
  const absl::Status status = WriteTimelineSvg(path, {Lynx()}, "t");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), path)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "No such file or directory")) << status;
}

TEST(WriteTimelineSvgTest, DirectoryAsPathIsAnError) {
  const absl::Status status = WriteTimelineSvg(TempDir(), {Lynx()}, "t");
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), TempDir())) << status;
}

}  // namespace
}  // namespace kvt::kvtctl
