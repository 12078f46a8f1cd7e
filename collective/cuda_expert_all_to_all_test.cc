// The CUDA MoE Dispatch/Combine against the CPU ExpertAllToAll: one forked process per rank (the parent never
// touches CUDA), each mapping the others' receive buffers through CUDA IPC. Every received row, its source and
// slots must be bitwise the CPU backend's (rounded to the element type); Combine must be bitwise the stated
// formula (for fp32: the CPU backend's Combine). A case makes back-to-back Dispatches before their Combines, a
// rank with no tokens, a rank at capacity and a repeated Combine. Every test skips without a CUDA device (CI).
#include "collective/cuda_expert_all_to_all.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_util.h"
#include "gtest/gtest.h"
#include "collective/data_type.h"
#include "collective/in_process_wire.h"
#include "collective/moe.h"
#include "collective/moe_testing.h"
#include "collective/multi_process_testing.h"
#include "collective/tcp_wire.h"

namespace kvt::collective {
namespace {


#define SKIP_WITHOUT_CUDA() \
  if (::kvt::CudaDeviceCountInChild() == 0) GTEST_SKIP() << "no CUDA device (counted in a child process)"

struct MoeCase {  // experts_per_rank * 2 >= topk: every world has enough experts for distinct top-k
  std::string name;
  DataType type;
  DispatchQuant quant;
  int group_size, hidden, topk, experts_per_rank, max_tokens;
  float scale = 1.0f;  // 1e-38: groups whose FP8 scale is subnormal
};

std::vector<MoeCase> Cases() {
  return {
      {"fp32 FP8 g128", DataType::kFloat32, DispatchQuant::kFp8, 128, 512, 6, 3, 40},
      {"bf16 FP8 g64", DataType::kBfloat16, DispatchQuant::kFp8, 64, 1024, 8, 8, 33},
      {"fp16 FP8 g512", DataType::kFloat16, DispatchQuant::kFp8, 512, 1040, 2, 2, 24},
      {"fp32 FP8 g16 subnormal scales", DataType::kFloat32, DispatchQuant::kFp8, 16, 128, 3, 2, 20, 1e-38f},
      {"fp32 raw", DataType::kFloat32, DispatchQuant::kNone, 128, 256, 4, 2, 24},
      {"bf16 raw", DataType::kBfloat16, DispatchQuant::kNone, 128, 256, 5, 4, 24},
  };
}

// The calls of a case: D0, D1, C0, C1, D2, C2, C2.
constexpr int kDispatches = 3;

int TokensOf(const MoeCase& c, int call, int rank) {
  switch (call) {
    case 0:  // 3 fewer for each rank, at least one (rank 7 of the 20-token case would get -1)
      return std::max(1, c.max_tokens - 3 * rank);
    case 1:
      return rank == 1 ? 0 : 11 + rank;
    default:
      return c.max_tokens;
  }
}

// Rank r's input of Dispatch `call`, already rounded to the case's type.
MoeRankData InputOf(const MoeCase& c, int call, int rank, int world) {
  MoeRankData d = RandomMoeRankData(TokensOf(c, call, rank), c.hidden, c.topk, c.experts_per_rank * world,
                                    1000 * call + rank);
  for (float& v : d.tokens) v = RoundTo(c.type, v * c.scale);
  return d;
}

// A DispatchResult as floats, for the record file: offsets, sources and slots, then the tokens.
std::vector<float> Flatten(const DispatchResult& d) {
  std::vector<float> f;
  const auto put = [&f](const auto& v) {
    f.push_back(static_cast<float>(v.size()));
    for (const auto x : v) f.push_back(static_cast<float>(x));
  };
  put(d.rank_offsets);
  put(d.source_rank);
  put(d.source_index);
  put(d.slot_offsets);
  put(d.slot_expert);
  put(d.slot_weight);
  put(d.tokens);
  return f;
}

// The stand-in expert on the GPU's own rows: slot k of row r gets RoundTo(type, ExpertScale(global) * row).
std::vector<float> ExpertOutputs(const MoeCase& c, const CudaDispatchResult& d, int rank, int world,
                                 absl::Status& status) {
  const size_t rows = static_cast<size_t>(world) * c.max_tokens;
  std::vector<uint8_t> raw(rows * c.hidden * numerics::DTypeBytes(c.type));
  std::vector<int32_t> experts(rows * c.topk);
  status = ::kvt::CopyToHost(raw.data(), d.rows, raw.size());
  if (status.ok()) status = ::kvt::CopyToHost(experts.data(), d.slot_expert, experts.size() * 4);
  if (status.ok()) status = ::kvt::Synchronize();
  const std::vector<float> tokens = DecodeAs(c.type, raw);
  std::vector<float> out(rows * c.topk * c.hidden, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    for (int k = 0; k < c.topk; ++k) {
      const int32_t e = experts[r * c.topk + k];
      if (e < 0) continue;
      const float s = ExpertScale(rank * c.experts_per_rank + e);
      for (int h = 0; h < c.hidden; ++h) {
        out[(r * c.topk + k) * c.hidden + h] = RoundTo(c.type, s * tokens[r * c.hidden + h]);
      }
    }
  }
  return out;
}

// One rank's run of a case: records D0, D1, C0, C1, D2, C2, C2' (dispatches flattened, combines as floats).
int RunRank(ForkedRank& self, const MoeCase& c, int world) {
  auto wire = TcpWire::Create({.rank = self.rank, .peers = self.peers, .bootstrap_timeout = absl::Seconds(30)},
                              std::move(self.listener));
  if (!wire.ok()) {
    self.records.Write(wire.status(), {});
    return 2;
  }
  auto made = CudaExpertAllToAll::Create(*std::move(wire), {.hidden = c.hidden,
                                                            .topk = c.topk,
                                                            .num_experts = c.experts_per_rank * world,
                                                            .max_tokens = c.max_tokens,
                                                            .type = c.type,
                                                            .quant = c.quant,
                                                            .group_size = c.group_size});
  if (!made.ok()) {
    self.records.Write(made.status(), {});
    return 2;
  }
  CudaExpertAllToAll& a2a = **made;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::vector<std::unique_ptr<DeviceBuffer>> keep;
  const auto upload = [&keep](const void* data, size_t bytes) -> void* {
    auto b = DeviceBuffer::Create(std::max<size_t>(bytes, 16));
    if (!b.ok()) return nullptr;
    // The copy is asynchronous on the default stream, which the exchange's stream does not wait for.
    if (bytes > 0 && !::kvt::CopyToDevice((*b)->get(), data, bytes).ok()) return nullptr;
    if (!::kvt::Synchronize().ok()) return nullptr;
    keep.push_back(*std::move(b));
    return keep.back()->get();
  };
  const auto dispatch = [&](int call) -> absl::StatusOr<CudaDispatchResult> {
    const MoeRankData in = InputOf(c, call, self.rank, world);
    const std::vector<uint8_t> tokens = EncodeAs(c.type, in.tokens);
    void* t = upload(tokens.data(), tokens.size());
    void* e = upload(in.topk_experts.data(), in.topk_experts.size() * 4);
    void* w = upload(in.topk_weights.data(), in.topk_weights.size() * 4);
    if (t == nullptr || e == nullptr || w == nullptr) return absl::InternalError("upload failed");
    return a2a.DispatchAsync(t, static_cast<int32_t*>(e), static_cast<float*>(w), in.num_tokens());
  };
  const auto record_dispatch = [&](const absl::StatusOr<CudaDispatchResult>& d) {
    if (!d.ok()) return self.records.Write(d.status(), {});
    absl::StatusOr<DispatchResult> host = a2a.ReadDispatch(*d);
    self.records.Write(host.status(), host.ok() ? Flatten(*host) : std::vector<float>{});
  };
  const auto combine = [&](const absl::StatusOr<CudaDispatchResult>& d, int call) {
    if (!d.ok()) return self.records.Write(d.status(), {});
    absl::Status s;
    const std::vector<float> y = ExpertOutputs(c, *d, self.rank, world, s);
    const std::vector<uint8_t> y_bytes = EncodeAs(c.type, y);
    void* dy = upload(y_bytes.data(), y_bytes.size());
    const size_t out_bytes = static_cast<size_t>(TokensOf(c, call, self.rank)) * c.hidden * numerics::DTypeBytes(c.type);
    auto out = DeviceBuffer::Create(std::max<size_t>(out_bytes, 16));
    if (s.ok() && dy == nullptr) s = absl::InternalError("upload failed");
    if (s.ok()) s = out.status();
    if (s.ok()) s = a2a.CombineAsync(*d, dy, (*out)->get());
    if (s.ok()) s = a2a.Synchronize(nullptr, deadline);
    std::vector<uint8_t> got(out_bytes);
    if (s.ok() && out_bytes > 0) s = ::kvt::CopyToHost(got.data(), (*out)->get(), out_bytes);
    if (s.ok()) s = ::kvt::Synchronize();
    self.records.Write(s, s.ok() ? DecodeAs(c.type, got) : std::vector<float>{});
  };
  // D0 and D1 back to back (two buffer sets), then their Combines in order, then D2 combined twice.
  const absl::StatusOr<CudaDispatchResult> d0 = dispatch(0);
  const absl::StatusOr<CudaDispatchResult> d1 = dispatch(1);
  absl::Status s = a2a.Synchronize(nullptr, deadline);
  if (!s.ok()) {
    self.records.Write(s, {});
    return 3;
  }
  record_dispatch(d0);
  record_dispatch(d1);
  combine(d0, 0);
  combine(d1, 1);
  const absl::StatusOr<CudaDispatchResult> d2 = dispatch(2);
  s = a2a.Synchronize(nullptr, deadline);
  if (!s.ok()) {
    self.records.Write(s, {});
    return 3;
  }
  record_dispatch(d2);
  combine(d2, 2);
  combine(d2, 2);
  return 0;
}

// The CPU backend's results of every rank for each Dispatch, and (fp32) its Combine with the stand-in experts.
struct Reference {
  std::vector<std::vector<DispatchResult>> dispatched;  // [call][rank]
  std::vector<std::vector<std::vector<float>>> combined;  // [call][rank]: CPU Combine of fp32 expert outputs
};

Reference RunCpu(const MoeCase& c, int world) {
  Reference ref;
  ref.dispatched.assign(kDispatches, std::vector<DispatchResult>(world));
  ref.combined.assign(kDispatches, std::vector<std::vector<float>>(world));
  auto hub = std::make_shared<InProcessHub>(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto a2a = ExpertAllToAll::Create(hub->Wire(r));
      ASSERT_TRUE(a2a.ok()) << a2a.status();
      for (int call = 0; call < kDispatches; ++call) {
        const MoeRankData in = InputOf(c, call, r, world);
        auto d = (*a2a)->Dispatch(in.Input(), {.quant = c.quant, .group_size = c.group_size});
        ASSERT_TRUE(d.ok()) << d.status();
        ref.dispatched[call][r] = **d;
        std::vector<float>& out = ref.combined[call][r];
        out.assign(in.num_tokens() * c.hidden, 0.0f);
        ASSERT_TRUE((*a2a)->Combine(**d, RunScaleExperts(**d, r), absl::MakeSpan(out)).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return ref;
}

// Combine as the CUDA backend defines it, from the CPU's Dispatch results: per holding rank d, the sum over the
// row's slots in top-k order of fp32(w * RoundTo(type, scale * RoundTo(type, row))), rounded to the type; then
// those partial sums added in rank order in fp32 and rounded to the type.
std::vector<float> ExpectedCombine(const MoeCase& c, const Reference& ref, int call, int rank, int world) {
  const size_t n = TokensOf(c, call, rank);
  std::vector<float> sum(n * c.hidden, 0.0f);
  for (int d = 0; d < world; ++d) {
    const DispatchResult& got = ref.dispatched[call][d];
    for (size_t row = 0; row < got.num_rows(); ++row) {
      if (got.source_rank[row] != rank) continue;
      const size_t t = got.source_index[row];
      for (int h = 0; h < c.hidden; ++h) {
        float partial = 0.0f;
        const float x = RoundTo(c.type, got.tokens[row * c.hidden + h]);
        for (size_t s = got.slot_offsets[row]; s < got.slot_offsets[row + 1]; ++s) {
          const float y = RoundTo(c.type, ExpertScale(d * c.experts_per_rank + got.slot_expert[s]) * x);
          partial += got.slot_weight[s] * y;
        }
        sum[t * c.hidden + h] += RoundTo(c.type, partial);
      }
    }
  }
  for (float& v : sum) v = RoundTo(c.type, v);
  return sum;
}

size_t CountDifferences(const std::vector<float>& got, const std::vector<float>& want, size_t* first) {
  size_t differ = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0 && differ++ == 0) *first = i;
  }
  return differ;
}

class CudaMoeTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CudaMoeTest, DispatchAndCombineAreBitwiseTheCpuBackendsOnEveryRank) {
  SKIP_WITHOUT_CUDA();
  const int world = std::get<0>(GetParam());
  const MoeCase c = Cases()[std::get<1>(GetParam())];
  ForkedRun run = RunForked(world, absl::Seconds(120), [&](ForkedRank& self) { return RunRank(self, c, world); });
  for (int r = 0; r < world; ++r) {
    std::string codes;
    for (const Record& record : run.records[r]) absl::StrAppend(&codes, absl::StatusCodeToString(record.code), " ");
    ASSERT_TRUE(run.exits[r].ok()) << run.exits[r] << "; its records: " << codes;
  }
  const Reference ref = RunCpu(c, world);
  // Record order: D0, D1, C0, C1, D2, C2, C2'.
  const int dispatch_at[kDispatches] = {0, 1, 4};
  const int combine_at[][2] = {{2, 0}, {3, 1}, {5, 2}, {6, 2}};
  for (int r = 0; r < world; ++r) {
    const std::vector<Record>& got = run.records[r];
    ASSERT_EQ(got.size(), 7u) << c.name << " rank " << r;
    for (const Record& record : got) ASSERT_EQ(record.code, absl::StatusCode::kOk) << c.name << " rank " << r;
    for (int call = 0; call < kDispatches; ++call) {
      DispatchResult want = ref.dispatched[call][r];
      for (float& v : want.tokens) v = RoundTo(c.type, v);
      const std::vector<float> want_flat = Flatten(want);
      const std::vector<float>& have = got[dispatch_at[call]].values;
      ASSERT_EQ(have.size(), want_flat.size()) << c.name << " rank " << r << " dispatch " << call;
      size_t first = 0;
      const size_t differ = CountDifferences(have, want_flat, &first);
      EXPECT_EQ(differ, 0u) << c.name << " rank " << r << " dispatch " << call << ": " << differ
                            << " values differ, first at " << first << ": got " << have[first] << ", want "
                            << want_flat[first];
    }
    for (const auto& [at, call] : combine_at) {
      const std::vector<float> want = ExpectedCombine(c, ref, call, r, world);
      if (c.type == DataType::kFloat32) {
        EXPECT_EQ(want, ref.combined[call][r]) << "the stated formula is the CPU Combine for fp32";
      }
      const std::vector<float>& have = got[at].values;
      ASSERT_EQ(have.size(), want.size()) << c.name << " rank " << r << " combine " << call;
      size_t first = 0;
      const size_t differ = CountDifferences(have, want, &first);
      EXPECT_EQ(differ, 0u) << c.name << " rank " << r << " combine " << call << ": " << differ
                            << " values differ, first at " << first << ": got " << have[first] << ", want "
                            << want[first];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldsAndCases, CudaMoeTest,
                         ::testing::Combine(::testing::Range(2, 9), ::testing::Range(0, 6)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return absl::StrCat("World", std::get<0>(info.param), "Case", std::get<1>(info.param));
                         });

// The failure paths on three ranks: a NaN token and a bad expert id fail the call on every rank (and the next call
// works), host-side argument errors, a stale result, and a silent rank (DEADLINE_EXCEEDED).
TEST(CudaMoeFailureTest, BadInputStaleResultsAndSilence) {
  SKIP_WITHOUT_CUDA();
  constexpr int kWorld = 3;
  const MoeCase c{"fail", DataType::kFloat32, DispatchQuant::kFp8, 128, 256, 4, 2, 16};
  ForkedRun run = RunForked(kWorld, absl::Seconds(120), [&](ForkedRank& self) {
    auto wire = TcpWire::Create({.rank = self.rank, .peers = self.peers}, std::move(self.listener));
    if (!wire.ok()) return 2;
    auto made = CudaExpertAllToAll::Create(
        *std::move(wire), {.hidden = c.hidden, .topk = c.topk, .num_experts = 6, .max_tokens = c.max_tokens,
                           .type = c.type, .quant = c.quant});
    if (!made.ok()) {
      self.records.Write(made.status(), {});
      return 2;
    }
    CudaExpertAllToAll& a2a = **made;
    const CudaMoeCallOptions quick{.timeout = absl::Seconds(2)};
    MoeRankData in = RandomMoeRankData(c.max_tokens, c.hidden, c.topk, 6, 7 + self.rank);
    auto t = DeviceBuffer::Create(in.tokens.size() * 4);
    auto e = DeviceBuffer::Create(in.topk_experts.size() * 4);
    auto w = DeviceBuffer::Create(in.topk_weights.size() * 4);
    if (!t.ok() || !e.ok() || !w.ok()) return 2;
    const auto upload = [&]() -> absl::Status {
      if (!::kvt::CopyToDevice((*t)->get(), in.tokens.data(), in.tokens.size() * 4).ok() ||
          !::kvt::CopyToDevice((*e)->get(), in.topk_experts.data(), in.topk_experts.size() * 4).ok() ||
          !::kvt::CopyToDevice((*w)->get(), in.topk_weights.data(), in.topk_weights.size() * 4).ok()) {
        return absl::InternalError("upload failed");
      }
      return ::kvt::Synchronize();  // the exchange's stream does not wait for the default stream
    };
    const auto run_call = [&]() -> absl::Status {
      if (absl::Status s = upload(); !s.ok()) return s;
      auto d = a2a.DispatchAsync((*t)->get(), static_cast<int32_t*>((*e)->get()), static_cast<float*>((*w)->get()),
                                 c.max_tokens, quick);
      if (!d.ok()) return d.status();
      return a2a.Synchronize(nullptr, absl::Now() + absl::Seconds(20));
    };
    // 0: more tokens than max_tokens, refused on the host.
    self.records.Write(a2a.DispatchAsync((*t)->get(), static_cast<int32_t*>((*e)->get()),
                                         static_cast<float*>((*w)->get()), c.max_tokens + 1)
                           .status(),
                       {});
    // 1: rank 1 has a NaN token value.
    if (self.rank == 1) in.tokens[100] = std::numeric_limits<float>::quiet_NaN();
    self.records.Write(run_call(), {});
    in.tokens[100] = 0.5f;
    // 2: rank 2 routes a slot to expert 6 (there are 6).
    const int32_t saved = in.topk_experts[9];
    if (self.rank == 2) in.topk_experts[9] = 6;
    self.records.Write(run_call(), {});
    in.topk_experts[9] = saved;
    // 3: the next call works; 4: combining its result three Dispatches later is refused.
    if (!upload().ok()) return 2;
    auto first = a2a.DispatchAsync((*t)->get(), static_cast<int32_t*>((*e)->get()),
                                   static_cast<float*>((*w)->get()), c.max_tokens, quick);
    self.records.Write(first.ok() ? a2a.Synchronize(nullptr, absl::Now() + absl::Seconds(20)) : first.status(), {});
    for (int i = 0; i < 2; ++i) (void)run_call();
    auto y = DeviceBuffer::Create(size_t{kWorld} * c.max_tokens * c.topk * c.hidden * 4);
    auto out = DeviceBuffer::Create(static_cast<size_t>(c.max_tokens) * c.hidden * 4);
    if (!y.ok() || !out.ok() || !first.ok()) return 2;
    self.records.Write(a2a.CombineAsync(*first, (*y)->get(), (*out)->get()), {});
    // 5: rank 2 stays silent; the others give up after the call's timeout.
    if (self.rank != 2) {
      const absl::Time start = absl::Now();
      const absl::Status s = run_call();
      self.records.Write(s, {}, absl::Now() - start);
    }
    return 0;
  });
  for (const absl::Status& exit : run.exits) ASSERT_TRUE(exit.ok()) << exit;
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<Record>& got = run.records[r];
    ASSERT_GE(got.size(), 5u) << "rank " << r;
    EXPECT_EQ(got[0].code, absl::StatusCode::kInvalidArgument) << "rank " << r << ": too many tokens";
    EXPECT_EQ(got[1].code, absl::StatusCode::kInvalidArgument) << "rank " << r << ": NaN on rank 1";
    EXPECT_EQ(got[2].code, absl::StatusCode::kInvalidArgument) << "rank " << r << ": bad expert on rank 2";
    EXPECT_EQ(got[3].code, absl::StatusCode::kOk) << "rank " << r << ": the call after";
    EXPECT_EQ(got[4].code, absl::StatusCode::kInvalidArgument) << "rank " << r << ": stale result";
    if (r != 2) {
      ASSERT_EQ(got.size(), 6u) << "rank " << r;
      EXPECT_EQ(got[5].code, absl::StatusCode::kDeadlineExceeded) << "rank " << r;
      EXPECT_LT(got[5].elapsed, absl::Seconds(15)) << "rank " << r;
    }
  }
}

// Ranks that disagree on the shape fail at Create, on every rank.
TEST(CudaMoeFailureTest, DisagreeingShapeFailsCreate) {
  SKIP_WITHOUT_CUDA();
  ForkedRun run = RunForked(2, absl::Seconds(60), [&](ForkedRank& self) {
    auto wire = TcpWire::Create({.rank = self.rank, .peers = self.peers}, std::move(self.listener));
    if (!wire.ok()) return 2;
    auto made = CudaExpertAllToAll::Create(
        *std::move(wire), {.hidden = self.rank == 0 ? 256 : 512, .topk = 2, .num_experts = 4, .max_tokens = 8});
    self.records.Write(made.status(), {});
    return 0;
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(run.exits[r].ok()) << run.exits[r];
    ASSERT_EQ(run.records[r].size(), 1u);
    EXPECT_EQ(run.records[r][0].code, absl::StatusCode::kFailedPrecondition) << "rank " << r;
  }
}

TEST(CudaMoeOptionsTest, BadOptionsAreRefusedBeforeAnyGpuWork) {
  auto hub = std::make_shared<InProcessHub>(1);
  const auto create = [&](CudaExpertAllToAllOptions o) { return CudaExpertAllToAll::Create(hub->Wire(0), o).status(); };
  EXPECT_EQ(create({.hidden = 100, .topk = 2, .num_experts = 4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create({.hidden = 128, .topk = 0, .num_experts = 4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create({.hidden = 128, .topk = 33, .num_experts = 4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create({.hidden = 128, .topk = 2, .num_experts = 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create({.hidden = 128, .topk = 2, .num_experts = 4, .max_tokens = 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create({.hidden = 128, .topk = 2, .num_experts = 4, .max_tokens = 9000}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create({.hidden = 128, .topk = 2, .num_experts = 4, .group_size = 100}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create({.hidden = 128, .topk = 2, .num_experts = 4, .quant = DispatchQuant::kInt}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaExpertAllToAll::Create(nullptr, {.hidden = 128, .topk = 2, .num_experts = 4}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::collective
