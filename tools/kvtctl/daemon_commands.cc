// `kvtctl stats`, `kvtctl watch`, `kvtctl timeline`, `kvtctl profile`; see daemon_commands.h.
#include "tools/kvtctl/daemon_commands.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "tools/kvtctl/flag_set.h"
#include "tools/kvtctl/stage_table.h"

namespace kvt::kvtctl {
namespace {

constexpr char kStatsUsage[] =
    "Usage: kvtctl stats [--socket PATH] [--requests] [--json]\n"
    "  a running kvtd's counters (transfers, bytes, rejected chunks) and, with --requests, its live "
    "requests.\n";
constexpr char kWatchUsage[] =
    "Usage: kvtctl watch [--socket PATH] [--side prefill|decode] [--timeout-s N] REQUEST_ID\n"
    "  a request's events, replayed from the start, until DONE (exit 0) or FAILED (exit 1).\n";
constexpr char kTimelineUsage[] =
    "Usage: kvtctl timeline [--socket PATH] --request ID [--request ID ...] [--side decode|prefill] [--svg "
    "FILE]\n"
    "                       [--json]\n"
    "  per-layer anchor and full-precision arrival times of finished or running requests, as a table and an "
    "SVG.\n";

constexpr char kProfileUsage[] =
    "Usage: kvtctl profile [--socket PATH] [--side prefill|decode] [--json] REQUEST_ID\n"
    "  where a live or recently finished request's time went on the daemon, stage by stage "
    "(docs/DAEMON.md).\n";

double Ms(uint64_t us) { return static_cast<double>(us) / 1000.0; }

std::string SideName(v1::Side side) {
  switch (side) {
    case v1::SIDE_PREFILL:
      return "prefill";
    case v1::SIDE_DECODE:
      return "decode";
    default:
      return "-";
  }
}

// "" (let the daemon pick), "prefill" or "decode"; nullopt for anything else.
std::optional<v1::Side> ParseSide(const std::string& name) {
  if (name.empty()) return v1::SIDE_UNSPECIFIED;
  if (name == "prefill") return v1::SIDE_PREFILL;
  if (name == "decode") return v1::SIDE_DECODE;
  return std::nullopt;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// One connect(2) to the unix socket: a missing socket file or a stale one with no daemon behind it fails here
// at once (UNAVAILABLE naming the socket and how to start kvtd), where kvt::Client::Connect would wait out
// its connect timeout first.
absl::Status CheckSomethingListens(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--socket '", path, "' is not a unix socket path (1..",
                                                   sizeof(addr.sun_path) - 1, " bytes)"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(AF_UNIX): ", std::strerror(errno)));
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int error = errno;
  close(fd);
  if (rc == 0) return absl::OkStatus();
  const std::string why = absl::StrCat(path, " (", std::strerror(error), ")");
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(absl::StrCat("may not connect to kvtd's socket ", why,
                                                    "; the socket's file permissions decide who may"));
  }
  return absl::UnavailableError(absl::StrCat("no kvtd is listening on ", why,
                                             "; start one (kvtd --client_socket=", path,
                                             ") or pass --socket with its client socket"));
}

absl::StatusOr<std::unique_ptr<Client>> ConnectToDaemon(const std::string& socket) {
  if (absl::Status s = CheckSomethingListens(socket); !s.ok()) return s;
  ClientOptions options;
  options.socket = socket;
  options.call_timeout = absl::Seconds(10);
  return Client::Connect(options);
}

// --- stats ---

int RunStats(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "stats";
  std::string socket = ClientOptions().socket;
  bool requests = false, json = false;
  FlagSet flags("kvtctl stats");
  flags.String("socket", &socket, "the daemon's client socket (kvtd --client_socket)");
  flags.Bool("requests", &requests, "also list the live requests");
  flags.Bool("json", &json, "print one JSON document instead of the tables");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kStatsUsage)) return *exit;
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectToDaemon(socket);
  if (!client.ok()) return Failure(io, cmd, client.status());
  absl::StatusOr<v1::StatsResponse> stats = (*client)->Stats(requests);
  if (!stats.ok()) return Failure(io, cmd, stats.status());
  io.out << (json ? StatsToJson(*stats, requests).dump(2) + "\n" : FormatStats(*stats, requests));
  return kExitOk;
}

// What the commands about one request (watch, profile) share: --socket, --side and its REQUEST_ID.
struct RequestFlags {
  std::string socket = ClientOptions().socket;
  std::string side_name;
  v1::Side side = v1::SIDE_UNSPECIFIED;
  std::string request_id;

  void Register(FlagSet& flags) {
    flags.String("socket", &socket, "the daemon's client socket (kvtd --client_socket)");
    flags.String("side", &side_name, "prefill | decode, for a daemon that has both sides of the request");
  }
  // After ParseCommandLine: the exit code of a usage error (no REQUEST_ID, a bad --side), nullopt when all is well.
  std::optional<int> Resolve(const FlagSet& flags, const CommandIo& io, const std::string& cmd, const char* usage) {
    if (flags.positional().empty()) return UsageError(io, cmd, "which request? give its REQUEST_ID", usage);
    const std::optional<v1::Side> parsed = ParseSide(side_name);
    if (!parsed) {
      return UsageError(io, cmd, absl::StrCat("--side must be prefill or decode, got '", side_name, "'"),
                        flags.Usage());
    }
    side = *parsed;
    request_id = flags.positional()[0];
    return std::nullopt;
  }
};

// --- watch ---

int RunWatch(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "watch";
  RequestFlags request;
  double timeout_s = 300;
  FlagSet flags("kvtctl watch");
  request.Register(flags);
  flags.Double("timeout-s", &timeout_s, "give up after this many seconds");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kWatchUsage, /*max_positional=*/1)) return *exit;
  if (auto exit = request.Resolve(flags, io, cmd, kWatchUsage)) return *exit;
  if (!(timeout_s > 0)) return UsageError(io, cmd, "--timeout-s must be positive", flags.Usage());
  const std::string& request_id = request.request_id;

  absl::StatusOr<std::unique_ptr<Client>> client = ConnectToDaemon(request.socket);
  if (!client.ok()) return Failure(io, cmd, client.status());
  bool failed_event = false;
  const absl::Status s = (*client)->Watch(
      request_id,
      [&](const v1::TransferEvent& e) {
        failed_event = failed_event || e.kind() == v1::TransferEvent::FAILED;
        io.out << FormatEvent(e) << "\n" << std::flush;
      },
      absl::Seconds(timeout_s), request.side);
  if (s.ok()) return kExitOk;
  if (failed_event) {
    return Failure(io, cmd,
                   absl::Status(s.code(), absl::StrCat("request ", request_id, " failed: ", s.message())));
  }
  return Failure(io, cmd, s);
}

// --- timeline ---

struct WatchedRequest {
  std::string request_id;
  absl::Status status;  // how its watch ended: OK after DONE
  TimelineSeries series;
};

std::string OptionalMs(const std::optional<double>& ms) {
  return ms ? absl::StrFormat("%.1f", *ms) : std::string("-");
}

void PrintTimeline(const WatchedRequest& r, const std::string& side, std::ostream& out) {
  out << "request " << r.request_id << " (" << side << " side): ";
  if (r.series.done_ms) {
    out << absl::StrFormat("done at %.1f ms\n", *r.series.done_ms);
  } else {
    out << "not done: " << r.status.message() << " (" << absl::StatusCodeToString(r.status.code()) << ")\n";
  }
  out << absl::StrFormat("%6s %12s %12s\n", "layer", "anchor ms", "full ms");
  for (const LayerTimes& l : r.series.layers) {
    out << absl::StrFormat("%6d %12s %12s\n", l.layer, OptionalMs(l.anchor_ms), OptionalMs(l.full_ms));
  }
}

nlohmann::json TimelineToJson(const std::vector<WatchedRequest>& requests, const std::string& side,
                              const std::string& svg) {
  auto ms = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json out = nlohmann::json::array();
  for (const WatchedRequest& r : requests) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerTimes& l : r.series.layers) {
      layers.push_back({{"layer", l.layer}, {"anchor_ms", ms(l.anchor_ms)}, {"full_ms", ms(l.full_ms)}});
    }
    out.push_back({{"request_id", r.request_id},
                   {"status", absl::StatusCodeToString(r.status.code())},
                   {"message", std::string(r.status.message())},
                   {"done_ms", ms(r.series.done_ms)},
                   {"layers", layers}});
  }
  return {{"side", side},
          {"svg", svg.empty() ? nlohmann::json(nullptr) : nlohmann::json(svg)},
          {"requests", out}};
}

int RunTimeline(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "timeline";
  std::string socket = ClientOptions().socket, side_name = "decode", svg = "kvt-timeline.svg";
  std::vector<std::string> request_ids;
  double timeout_s = 300;
  bool json = false;
  FlagSet flags("kvtctl timeline");
  flags.String("socket", &socket, "the daemon's client socket (kvtd --client_socket)");
  flags.Strings("request", &request_ids, "a request to draw; repeat for several");
  flags.String("side", &side_name, "prefill | decode: whose events (prefill: FULL_READY once acknowledged)");
  flags.String("svg", &svg, "where to write the timeline SVG (\"\" = nowhere)");
  flags.Double("timeout-s", &timeout_s, "give up on a request still running after this many seconds");
  flags.Bool("json", &json, "print one JSON document instead of the tables");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kTimelineUsage)) return *exit;
  if (request_ids.empty()) return UsageError(io, cmd, "give at least one --request", flags.Usage());
  const std::optional<v1::Side> side = ParseSide(side_name);
  if (!side || *side == v1::SIDE_UNSPECIFIED) {
    return UsageError(io, cmd, absl::StrCat("--side must be prefill or decode, got '", side_name, "'"),
                      flags.Usage());
  }
  if (!(timeout_s > 0)) return UsageError(io, cmd, "--timeout-s must be positive", flags.Usage());

  absl::StatusOr<std::unique_ptr<Client>> client = ConnectToDaemon(socket);
  if (!client.ok()) return Failure(io, cmd, client.status());
  // A request that cannot be watched (unknown, daemon error) stops the command; one that failed or did not
  // finish in time is still shown as far as it got, and the exit code says it did not finish.
  std::vector<WatchedRequest> watched;
  bool all_done = true;
  for (const std::string& id : request_ids) {
    std::vector<v1::TransferEvent> events;
    absl::Status s = (*client)->Watch(
        id, [&events](const v1::TransferEvent& e) { events.push_back(e); }, absl::Seconds(timeout_s), *side);
    if (!s.ok() && events.empty()) return Failure(io, cmd, s);
    all_done = all_done && s.ok();
    watched.push_back({id, std::move(s), TimelineFromEvents(id, events)});
  }
  if (!svg.empty()) {
    std::vector<TimelineSeries> series;
    for (const WatchedRequest& r : watched) series.push_back(r.series);
    const std::string title =
        absl::StrFormat("kvt timeline: per-layer KV arrival, %s side of the kvtd on %s", side_name, socket);
    if (absl::Status s = WriteTimelineSvg(svg, series, title); !s.ok()) return Failure(io, cmd, s);
  }
  if (json) {
    io.out << TimelineToJson(watched, side_name, svg).dump(2) << "\n";
  } else {
    for (const WatchedRequest& r : watched) PrintTimeline(r, side_name, io.out);
    if (!svg.empty()) io.out << "timeline: " << svg << "\n";
  }
  if (!all_done) {
    io.err << "kvtctl timeline: not every request finished; their rows stop where their events did\n";
    return kExitFailure;
  }
  return kExitOk;
}

// --- profile ---

int RunProfile(const std::vector<std::string>& args, const CommandIo& io) {
  const std::string cmd = "profile";
  RequestFlags request;
  bool json = false;
  FlagSet flags("kvtctl profile");
  request.Register(flags);
  flags.Bool("json", &json, "print one JSON document instead of the table");
  if (auto exit = ParseCommandLine(flags, args, io, cmd, kProfileUsage, /*max_positional=*/1)) return *exit;
  if (auto exit = request.Resolve(flags, io, cmd, kProfileUsage)) return *exit;
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectToDaemon(request.socket);
  if (!client.ok()) return Failure(io, cmd, client.status());
  absl::StatusOr<v1::ProfileResponse> profile = (*client)->Profile(request.request_id, request.side);
  if (!profile.ok()) return Failure(io, cmd, profile.status());
  if (json) {
    io.out << nlohmann::json({{"request_id", profile->request_id()},
                              {"side", SideName(profile->side())},
                              {"finished", profile->finished()},
                              {"stages", StagesToJson(*profile)}})
                  .dump(2)
           << "\n";
  } else {
    io.out << "request " << profile->request_id() << ", " << SideName(profile->side()) << " side"
           << (profile->finished() ? "" : " (still running)") << "\n"
           << FormatStageTable(*profile);
  }
  return kExitOk;
}

}  // namespace

std::string FormatStats(const v1::StatsResponse& s, bool with_requests) {
  std::string out;
  auto row = [&out](const char* name, const std::string& value) {
    absl::StrAppendFormat(&out, "%-22s %s\n", name, value);
  };
  auto mb = [](uint64_t bytes) { return absl::StrFormat("%.2f", bytes / 1e6); };
  row("daemon id", OrDash(s.daemon_id()));
  row("transfers started", absl::StrCat(s.transfers_started()));
  row("transfers done", absl::StrCat(s.transfers_done()));
  row("transfers failed", absl::StrCat(s.transfers_failed()));
  row("transfers cancelled", absl::StrCat(s.transfers_cancelled()));
  row("anchor sent (MB)", mb(s.anchor_bytes_sent()));
  row("residual sent (MB)", mb(s.residual_bytes_sent()));
  row("received (MB)", mb(s.bytes_received()));
  row("chunks rejected", absl::StrCat(s.chunks_rejected()));
  row("regions", absl::StrCat(s.regions()));
  row("in flight", absl::StrCat(s.in_flight()));
  if (!with_requests) return out;
  if (s.requests().empty()) return out + "\nno live requests\n";
  size_t id_width = 7;  // "request"
  for (const v1::RequestState& r : s.requests()) id_width = std::max(id_width, r.request_id().size());
  absl::StrAppendFormat(&out, "\n%-*s %-8s %-12s %-22s %15s %10s\n", id_width, "request", "side", "scheme",
                        "peer", "anchor/full", "age s");
  for (const v1::RequestState& r : s.requests()) {
    absl::StrAppendFormat(
        &out, "%-*s %-8s %-12s %-22s %15s %10.1f\n", id_width, r.request_id(), SideName(r.side()),
        OrDash(r.scheme()), OrDash(r.peer()),
        absl::StrFormat("%u/%u of %u", r.layers_anchor_ready(), r.layers_full_ready(), r.num_layers()),
        r.age_us() / 1e6);
  }
  out +=
      "\nanchor/full: layers whose anchor / full-precision KV is in the decode engine's blocks (prefill "
      "side:\n"
      "layers the decode daemon acknowledged), of the request's layers.\n";
  return out;
}

nlohmann::json StatsToJson(const v1::StatsResponse& s, bool with_requests) {
  nlohmann::json j = {{"daemon_id", s.daemon_id()},
                      {"transfers_started", s.transfers_started()},
                      {"transfers_done", s.transfers_done()},
                      {"transfers_failed", s.transfers_failed()},
                      {"transfers_cancelled", s.transfers_cancelled()},
                      {"anchor_bytes_sent", s.anchor_bytes_sent()},
                      {"residual_bytes_sent", s.residual_bytes_sent()},
                      {"bytes_received", s.bytes_received()},
                      {"chunks_rejected", s.chunks_rejected()},
                      {"regions", s.regions()},
                      {"in_flight", s.in_flight()}};
  if (!with_requests) return j;
  nlohmann::json requests = nlohmann::json::array();
  for (const v1::RequestState& r : s.requests()) {
    requests.push_back({{"request_id", r.request_id()},
                        {"side", SideName(r.side())},
                        {"scheme", r.scheme()},
                        {"peer", r.peer()},
                        {"num_layers", r.num_layers()},
                        {"layers_anchor_ready", r.layers_anchor_ready()},
                        {"layers_full_ready", r.layers_full_ready()},
                        {"age_ms", Ms(r.age_us())}});
  }
  j["requests"] = std::move(requests);
  return j;
}

std::string FormatEvent(const v1::TransferEvent& e) {
  std::string line = absl::StrFormat("+%.1f ms  %s", Ms(e.at_us()), v1::TransferEvent::Kind_Name(e.kind()));
  switch (e.kind()) {
    case v1::TransferEvent::ANCHOR_READY:
    case v1::TransferEvent::FULL_READY:
      absl::StrAppend(&line, " layer ", e.layer());
      break;
    case v1::TransferEvent::FAILED: {
      const int code = e.status_code();
      absl::StrAppend(&line, " ",
                      code >= 1 && code <= 16 ? absl::StatusCodeToString(static_cast<absl::StatusCode>(code))
                                              : absl::StrCat("code ", code),
                      ": ", e.message());
      break;
    }
    default:
      break;
  }
  return line;
}

TimelineSeries TimelineFromEvents(std::string label, absl::Span<const v1::TransferEvent> events) {
  TimelineSeries series;
  series.label = std::move(label);
  for (const v1::TransferEvent& e : events) {
    const bool per_layer =
        e.kind() == v1::TransferEvent::ANCHOR_READY || e.kind() == v1::TransferEvent::FULL_READY;
    if (e.kind() == v1::TransferEvent::DONE) series.done_ms = Ms(e.at_us());
    if (!per_layer) continue;
    while (series.layers.size() <= e.layer()) {
      series.layers.push_back(
          LayerTimes{static_cast<uint32_t>(series.layers.size()), std::nullopt, std::nullopt});
    }
    LayerTimes& l = series.layers[e.layer()];
    (e.kind() == v1::TransferEvent::ANCHOR_READY ? l.anchor_ms : l.full_ms) = Ms(e.at_us());
  }
  return series;
}

CommandGroup StatsCommandGroup() {
  return {"stats", "a running kvtd's counters and (--requests) its live requests", RunStats};
}

CommandGroup WatchCommandGroup() {
  return {"watch", "a request's events on a running kvtd, until DONE or FAILED", RunWatch};
}

CommandGroup TimelineCommandGroup() {
  return {"timeline", "per-layer anchor / full arrival of requests on a running kvtd, as a table and an SVG",
          RunTimeline};
}

CommandGroup ProfileCommandGroup() {
  return {"profile", "where a request's time went on a running kvtd, stage by stage", RunProfile};
}

}  // namespace kvt::kvtctl
