// The CUDA peer-memory AllReduce against the CPU reference: one forked process per rank (CUDA cannot be used
// in a child forked after the parent touched it, so the parent never does), each mapping the others' GPU
// workspaces through CUDA IPC. Every case's output must be bitwise WireCommunicator's on the same fp32 values
// (for bf16/fp16: that result rounded to the type) on every rank. Ranks share GPUs when there are fewer GPUs
// than ranks. Every test skips when no CUDA device is present (CI).
#include "collective/cuda_communicator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cuda_util.h"
#include "gtest/gtest.h"
#include "collective/all_reduce.h"
#include "collective/all_reduce_testing.h"
#include "collective/data_type.h"
#include "collective/in_process_wire.h"
#include "collective/multi_process_testing.h"
#include "collective/tcp_wire.h"

namespace kvt::collective {
namespace {


#define SKIP_WITHOUT_CUDA() \
  if (::kvt::CudaDeviceCountInChild() == 0) GTEST_SKIP() << "no CUDA device (counted in a child process)"

constexpr size_t kWorkspace = 96 << 10;  // small, so that several cases run in more than one round

struct Case {
  std::string name;
  DataType type;
  size_t values;
  AllReduceOptions options;
  bool device_api = true;  // false: the host-span AllReduce
  bool in_place = false;
  float input_scale = 1.0f;  // 1e-42: subnormal groups, whose inverse scale overflows fp32
};

std::vector<Case> Cases() {
  return {
      {"fp32 8/8 host, 3 chunks", DataType::kFloat32, 10007, {.chunk_bytes = 4 * 4096}, false},
      {"fp32 4/4", DataType::kFloat32, 10007, {.step1_bits = 4, .step2_bits = 4, .chunk_bytes = 4 * 4096}},
      {"fp32 4/8 (INT6)", DataType::kFloat32, 10007, {.step1_bits = 4, .step2_bits = 8}},
      {"fp32 5/6 spikes g64", DataType::kFloat32, 10007,
       {.step1_bits = 5, .step2_bits = 6, .group_size = 64, .spike_reserve = true, .chunk_bytes = 4 * 3001}},
      {"fp32 2/3 spikes g32", DataType::kFloat32, 9001,
       {.step1_bits = 2, .step2_bits = 3, .group_size = 32, .spike_reserve = true}},
      {"fp32 7/7 g16", DataType::kFloat32, 4099, {.step1_bits = 7, .step2_bits = 7, .group_size = 16}},
      {"fp32 subnormal (double fallback), g16", DataType::kFloat32, 3001,
       {.step1_bits = 4, .step2_bits = 4, .group_size = 16}, true, false, 1e-42f},
      {"fp32 3/3 g256", DataType::kFloat32, 10007, {.step1_bits = 3, .step2_bits = 3, .group_size = 256}},
      {"fp32 raw, rounds", DataType::kFloat32, 10007, {.step1_bits = 0, .step2_bits = 0, .chunk_bytes = 4 * 2048}},
      {"fp32 4/raw", DataType::kFloat32, 10007, {.step1_bits = 4, .step2_bits = 0, .chunk_bytes = 4 * 4096}},
      {"bf16 4/4 in place", DataType::kBfloat16, 65539, {.step1_bits = 4, .step2_bits = 4}, true, true},
      {"bf16 2/2 spikes", DataType::kBfloat16, 40000,
       {.step1_bits = 2, .step2_bits = 2, .spike_reserve = true}},
      {"bf16 raw, rounds", DataType::kBfloat16, 65539, {.step1_bits = 0, .step2_bits = 0, .chunk_bytes = 4 * 8192}},
      {"fp16 8/8", DataType::kFloat16, 30011, {.step1_bits = 8, .step2_bits = 8}},
      {"tiny (fewer values than ranks)", DataType::kFloat32, 2, {.step1_bits = 4, .step2_bits = 8}},
  };
}

std::vector<float> InputOf(const Case& c, int rank, size_t index) {
  std::vector<float> x = RandomWithOutliers(c.values, 9000 + 31 * index + rank);
  if (c.type == DataType::kFloat16) {
    for (float& v : x) v *= 0.01f;  // keep sums inside fp16's range
  }
  for (float& v : x) v *= c.input_scale;
  for (float& v : x) v = RoundTo(c.type, v);
  return x;
}

// WireCommunicator over `world` threads on the case's inputs, rounded to the case's type.
std::vector<float> Reference(const Case& c, size_t index, int world) {
  auto hub = std::make_shared<InProcessHub>(world);
  std::vector<std::vector<float>> outs(world, std::vector<float>(c.values));
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<WireCommunicator>> comm = WireCommunicator::Create(hub->Wire(r));
      if (!comm.ok()) {
        statuses[r] = comm.status();
        return;
      }
      const std::vector<float> in = InputOf(c, r, index);
      statuses[r] = (*comm)->AllReduce(in, absl::MakeSpan(outs[r]), c.options);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << c.name << ": reference failed: " << s;
  for (float& v : outs[0]) v = RoundTo(c.type, v);
  return outs[0];
}

// Runs one case on this rank's communicator; the output as floats.
// `edit_bytes`, when given, changes the device API's input bytes before the upload (to plant a NaN).
absl::StatusOr<std::vector<float>> RunCase(CudaCommunicator& comm, const Case& c, size_t index,
                                           const std::function<void(std::vector<uint8_t>&)>& edit_bytes = nullptr) {
  const std::vector<float> in = InputOf(c, comm.rank(), index);
  if (!c.device_api) {
    std::vector<float> out(in.size());
    absl::Status s = comm.AllReduce(in, absl::MakeSpan(out), c.options);
    if (!s.ok()) return s;
    return out;
  }
  std::vector<uint8_t> bytes = EncodeAs(c.type, in);
  if (edit_bytes) edit_bytes(bytes);
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> d_in = DeviceBuffer::Create(bytes.size());
  if (!d_in.ok()) return d_in.status();
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> d_out = DeviceBuffer::Create(bytes.size());
  if (!d_out.ok()) return d_out.status();
  absl::Status s = ::kvt::CopyToDevice((*d_in)->get(), bytes.data(), bytes.size());
  // The copy is asynchronous on the default stream, which the communicator's stream does not wait for.
  if (s.ok()) s = ::kvt::Synchronize();
  if (!s.ok()) return s;
  void* out = c.in_place ? (*d_in)->get() : (*d_out)->get();
  s = comm.AllReduceAsync((*d_in)->get(), out, c.values, c.type, c.options);
  if (!s.ok()) return s;
  s = comm.Synchronize(nullptr, absl::Now() + absl::Seconds(60));
  if (!s.ok()) return s;
  std::vector<uint8_t> got(bytes.size());
  s = ::kvt::CopyToHost(got.data(), out, got.size());
  if (!s.ok()) return s;
  return DecodeAs(c.type, got);
}

absl::StatusOr<std::unique_ptr<CudaCommunicator>> MakeCommunicator(ForkedRank& self,
                                                                    const CudaCommunicatorOptions& options) {
  absl::StatusOr<std::unique_ptr<TcpWire>> wire = TcpWire::Create(
      {.rank = self.rank, .peers = self.peers, .bootstrap_timeout = absl::Seconds(30)}, std::move(self.listener));
  if (!wire.ok()) return wire.status();
  return CudaCommunicator::Create(*std::move(wire), options);
}

absl::StatusOr<std::unique_ptr<CudaCommunicator>> MakeCommunicator(ForkedRank& self, size_t workspace) {
  return MakeCommunicator(self, {.workspace_bytes = workspace});
}

class CudaAllReduceTest : public ::testing::TestWithParam<int> {};

// Runs every case on `world` forked ranks with a communicator made with `options`, early launches then plain
// ones, and checks each rank's output bitwise against WireCommunicator with the options `reference_of` gives.
void ExpectEveryCaseBitwiseTheReference(int world, const CudaCommunicatorOptions& options,
                                        const std::function<Case(const Case&)>& reference_of) {
  const std::vector<Case> cases = Cases();
  ForkedRun run = RunForked(world, absl::Seconds(240), [&](ForkedRank& self) {
    absl::StatusOr<std::unique_ptr<CudaCommunicator>> comm = MakeCommunicator(self, options);
    if (!comm.ok()) {
      self.records.Write(comm.status(), {});
      return 2;
    }
    // Every case with early (programmatic dependent) launches, the default, then with plain ones.
    for (const bool early : {true, false}) {
      (*comm)->set_early_launch(early);
      for (size_t i = 0; i < cases.size(); ++i) {
        absl::StatusOr<std::vector<float>> out = RunCase(**comm, cases[i], i);
        self.records.Write(out.status(), out.ok() ? *out : std::vector<float>{});
      }
    }
    return 0;
  });
  for (const absl::Status& exit : run.exits) ASSERT_TRUE(exit.ok()) << exit;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<float> want = Reference(reference_of(cases[i]), i, world);
    for (const int pass : {0, 1}) {
      const std::string name = absl::StrCat(cases[i].name, pass == 0 ? ", early launches" : ", plain launches");
      const size_t at = pass * cases.size() + i;
      for (int r = 0; r < world; ++r) {
        ASSERT_GT(run.records[r].size(), at) << "rank " << r << " stopped before case " << name;
        const Record& got = run.records[r][at];
        ASSERT_EQ(got.code, absl::StatusCode::kOk) << name << " on rank " << r;
        ASSERT_EQ(got.values.size(), want.size()) << name;
        size_t differ = 0, first = 0;
        for (size_t k = 0; k < want.size(); ++k) {
          if (std::memcmp(&got.values[k], &want[k], 4) != 0 && differ++ == 0) first = k;
        }
        EXPECT_EQ(differ, 0u) << name << " on rank " << r << ": " << differ << " values differ, first at " << first
                              << ": got " << got.values[first] << ", want " << want[first];
      }
    }
  }
}

TEST_P(CudaAllReduceTest, EveryCaseIsBitwiseTheCpuReferenceOnEveryRank) {
  SKIP_WITHOUT_CUDA();
  ExpectEveryCaseBitwiseTheReference(GetParam(), {.workspace_bytes = kWorkspace}, [](const Case& c) { return c; });
}

// Calls of at most one_shot_bytes take the one-shot round, whose result is the two-step round's with an
// unquantized step 2; the larger cases (bf16 of 80 and 128 KiB) still take the two-step round, so the two
// kinds of round alternate on the same workspace (the one-shot region must not be the step areas).
TEST_P(CudaAllReduceTest, OneShotCallsAreBitwiseTheReferenceWithAnUnquantizedStepTwo) {
  SKIP_WITHOUT_CUDA();
  // Odd sizes on purpose: the one-shot region's halves must still start 16-byte aligned (spike headers are
  // stored as 16-byte words).
  constexpr size_t kOneShotBytes = (64 << 10) + 3;
  ExpectEveryCaseBitwiseTheReference(GetParam(),
                                     {.workspace_bytes = (8 << 20) + 1000, .one_shot_bytes = kOneShotBytes},
                                     [](const Case& c) {
                                       Case r = c;
                                       if (c.values * numerics::DTypeBytes(c.type) <= kOneShotBytes) {
                                         r.options.step2_bits = 0;
                                       }
                                       return r;
                                     });
}

TEST(CudaAllReduceOneShotTest, AOneShotRegionOverHalfTheWorkspaceIsRefused) {
  SKIP_WITHOUT_CUDA();
  ForkedRun run = RunForked(2, absl::Seconds(60), [&](ForkedRank& self) {
    absl::StatusOr<std::unique_ptr<CudaCommunicator>> comm =
        MakeCommunicator(self, {.workspace_bytes = 1 << 20, .one_shot_bytes = 256 << 10});
    self.records.Write(comm.status(), {});
    return 0;
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(run.records[r].size(), 1u);
    EXPECT_EQ(run.records[r][0].code, absl::StatusCode::kInvalidArgument) << "rank " << r;
  }
}

// Worlds 2-8, odd ones included: one GPU a rank on an 8-GPU machine; ranks share GPUs on smaller ones.
INSTANTIATE_TEST_SUITE_P(Worlds, CudaAllReduceTest, ::testing::Range(2, 9),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat("World", info.param); });

// The failure paths, on three ranks: a NaN on one rank fails the call on every rank (and the group stays in
// step), a rank that disagrees on the count is detected, and a silent rank gives DEADLINE_EXCEEDED.
class CudaAllReduceFailurePathTest : public ::testing::TestWithParam<bool> {};

TEST_P(CudaAllReduceFailurePathTest, BadInputDisagreementAndSilence) {
  SKIP_WITHOUT_CUDA();
  constexpr int kWorld = 3;
  const AllReduceOptions options{.step1_bits = 4, .step2_bits = 8, .timeout = absl::Seconds(2)};
  // The parameter: calls take the one-shot round (5000 fp32 values, under one_shot_bytes) or the two-step one.
  const CudaCommunicatorOptions comm_options{.workspace_bytes = size_t{4} << 20,
                                             .one_shot_bytes = GetParam() ? size_t{64} << 10 : 0};
  ForkedRun run = RunForked(kWorld, absl::Seconds(120), [&](ForkedRank& self) {
    absl::StatusOr<std::unique_ptr<CudaCommunicator>> comm = MakeCommunicator(self, comm_options);
    if (!comm.ok()) {
      self.records.Write(comm.status(), {});
      return 2;
    }
    CudaCommunicator& c = **comm;
    std::vector<float> in = RandomWithOutliers(5000, 77 + self.rank);
    std::vector<float> out(in.size());
    // 0: bad options, refused before anything runs.
    AllReduceOptions odd = options;
    odd.group_size = 100;
    self.records.Write(c.AllReduce(in, absl::MakeSpan(out), odd), {});
    // 1: rank 1 has a NaN at index 1234.
    if (self.rank == 1) in[1234] = std::numeric_limits<float>::quiet_NaN();
    self.records.Write(c.AllReduce(in, absl::MakeSpan(out), options), {});
    in[1234] = 1.0f;
    // 2: the next call works.
    absl::Status s = c.AllReduce(in, absl::MakeSpan(out), options);
    self.records.Write(s, out);
    // 3: rank 2 passes one value more.
    const size_t n = self.rank == 2 ? in.size() : in.size() - 1;
    self.records.Write(c.AllReduce(absl::MakeConstSpan(in).first(n), absl::MakeSpan(out).first(n), options), {});
    // 4: rank 2 stays silent; the others give up after options.timeout.
    if (self.rank != 2) {
      const absl::Time start = absl::Now();
      s = c.AllReduce(in, absl::MakeSpan(out), options);
      self.records.Write(s, {}, absl::Now() - start);
    }
    return 0;
  });
  for (const absl::Status& exit : run.exits) ASSERT_TRUE(exit.ok()) << exit;
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<Record>& got = run.records[r];
    ASSERT_GE(got.size(), 4u) << "rank " << r;
    EXPECT_EQ(got[0].code, absl::StatusCode::kInvalidArgument) << "rank " << r;
    EXPECT_EQ(got[1].code, absl::StatusCode::kInvalidArgument) << "rank " << r << ": NaN on rank 1";
    EXPECT_EQ(got[2].code, absl::StatusCode::kOk) << "rank " << r << ": the call after the NaN";
    EXPECT_EQ(got[3].code, absl::StatusCode::kFailedPrecondition) << "rank " << r << ": counts disagree";
    if (r != 2) {
      ASSERT_EQ(got.size(), 5u) << "rank " << r;
      EXPECT_EQ(got[4].code, absl::StatusCode::kDeadlineExceeded) << "rank " << r;
      EXPECT_LT(got[4].elapsed, absl::Seconds(15)) << "rank " << r;
    }
  }
  // The recovered call agrees bitwise across ranks.
  ASSERT_EQ(run.records[0][2].values.size(), 5000u);
  for (int r = 1; r < kWorld; ++r) {
    EXPECT_EQ(0, std::memcmp(run.records[0][2].values.data(), run.records[r][2].values.data(), 5000 * 4)) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Rounds, CudaAllReduceFailurePathTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("OneShot") : std::string("TwoStep");
                         });

TEST(CudaAllReduceFailureTest, WorldOfOneCopiesThrough) {
  SKIP_WITHOUT_CUDA();
  ForkedRun run = RunForked(1, absl::Seconds(60), [&](ForkedRank& self) {
    absl::StatusOr<std::unique_ptr<CudaCommunicator>> comm = MakeCommunicator(self, size_t{1} << 20);
    if (!comm.ok()) {
      self.records.Write(comm.status(), {});
      return 2;
    }
    const std::vector<float> in = RandomWithOutliers(1000, 5);
    std::vector<float> out(in.size());
    self.records.Write((*comm)->AllReduce(in, absl::MakeSpan(out), {.step1_bits = 0, .step2_bits = 0}), out);
    return 0;
  });
  ASSERT_TRUE(run.exits[0].ok()) << run.exits[0];
  ASSERT_EQ(run.records[0].size(), 1u);
  ASSERT_EQ(run.records[0][0].code, absl::StatusCode::kOk);
  EXPECT_EQ(run.records[0][0].values, RandomWithOutliers(1000, 5));
}

// ---- calls routed to NCCL (nccl_routing.h) -------------------------------------------------------------------
// These need NCCL: tools/gpu/run_gpu_collectives.sh sets KVT_NCCL_LIB to the machine's libnccl.so.2. NCCL wants
// one GPU per rank, so they run min(8, GPUs) ranks and skip below 2 GPUs.

std::string NcclPath() {
  const char* path = std::getenv("KVT_NCCL_LIB");
  return path == nullptr ? std::string() : std::string(path);
}

#define SKIP_WITHOUT_NCCL()                                                                  \
  SKIP_WITHOUT_CUDA();                                                                       \
  if (NcclPath().empty()) GTEST_SKIP() << "KVT_NCCL_LIB is not set (no NCCL to route to)"; \
  if (::kvt::CudaDeviceCountInChild() < 2) GTEST_SKIP() << "NCCL needs a GPU per rank, and there is one"

// The float64 sum of the case's inputs over the ranks, and the sum of magnitudes (for the error bound).
void ExactSums(const Case& c, size_t index, int world, std::vector<double>* sum, std::vector<double>* magnitude) {
  sum->assign(c.values, 0.0);
  magnitude->assign(c.values, 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> x = InputOf(c, r, index);
    for (size_t i = 0; i < x.size(); ++i) {
      (*sum)[i] += x[i];
      (*magnitude)[i] += std::fabs(x[i]);
    }
  }
}

TEST(CudaAllReduceNcclTest, RoutedCallsAgreeOnEveryRankAndTheRestStayBitwiseTheCpuReference) {
  SKIP_WITHOUT_NCCL();
  const int world = std::min(8, ::kvt::CudaDeviceCountInChild());  // NCCL: a GPU a rank
  // 0, 1: NCCL by the defaults (unquantized; quantized under 16 MiB). 2: after set_nccl_routing lowered the
  // threshold to 64 KiB, the same kind of call runs kvt's kernels and must be bitwise the CPU reference. 3: a NaN
  // on rank 1 in a routed call fails it on every rank (check_finite). 4: the next routed call works. 5: without
  // the check, the NaN reaches every rank's output and the call succeeds (NCCL's behaviour).
  const std::vector<Case> cases = {
      {"bf16 raw -> NCCL", DataType::kBfloat16, 1000003, {.step1_bits = 0, .step2_bits = 0}},
      {"fp32 4/4 small -> NCCL", DataType::kFloat32, 50001, {.step1_bits = 4, .step2_bits = 4}},
      {"bf16 4/8 above 64 KiB -> kvt", DataType::kBfloat16, 65539, {.step1_bits = 4, .step2_bits = 8}},
      {"fp16 raw with a NaN -> NCCL", DataType::kFloat16, 30011, {.step1_bits = 0, .step2_bits = 0}},
      {"fp16 raw after the NaN -> NCCL", DataType::kFloat16, 30011, {.step1_bits = 0, .step2_bits = 0}},
      {"fp16 raw with a NaN, unchecked -> NCCL", DataType::kFloat16, 30011, {.step1_bits = 0, .step2_bits = 0}},
  };
  const std::vector<AllReducePath> want_path = {AllReducePath::kNccl, AllReducePath::kNccl, AllReducePath::kKvt,
                                                AllReducePath::kNccl, AllReducePath::kNccl, AllReducePath::kNccl};
  ForkedRun run = RunForked(world, absl::Seconds(240), [&](ForkedRank& self) {
    absl::StatusOr<std::unique_ptr<CudaCommunicator>> comm =
        MakeCommunicator(self, {.device = self.rank,
                                .workspace_bytes = size_t{8} << 20,
                                .nccl_library = NcclPath(),
                                .nccl_routing = {.check_finite = true}});
    if (!comm.ok()) {
      self.records.Write(comm.status(), {});
      return 2;
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      if (i == 2) (*comm)->set_nccl_routing({.quantized_below_bytes = 64 << 10, .check_finite = true});
      if (i == 5) (*comm)->set_nccl_routing({.check_finite = false});
      Case c = cases[i];
      const AllReducePath path = (*comm)->PathOf(c.values, c.type, c.options);
      // Cases 3 and 5 (fp16): rank 1's input gets a NaN at index 777, its bits written directly (the host
      // conversion saturates a NaN to 65504).
      const bool plant_nan = (i == 3 || i == 5) && self.rank == 1;
      const absl::StatusOr<std::vector<float>> out = RunCase(**comm, c, i, [&](std::vector<uint8_t>& bytes) {
        const uint16_t fp16_nan = 0x7E00;
        if (plant_nan) std::memcpy(bytes.data() + 2 * 777, &fp16_nan, 2);
      });
      std::vector<float> values = out.ok() ? *out : std::vector<float>{};
      values.push_back(path == AllReducePath::kNccl ? 1.0f : 0.0f);  // the path, last
      self.records.Write(out.status(), values);
    }
    return 0;
  });
  for (const absl::Status& exit : run.exits) ASSERT_TRUE(exit.ok()) << exit;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    for (int r = 0; r < world; ++r) {
      ASSERT_GT(run.records[r].size(), i) << "rank " << r << " stopped before " << c.name;
      const Record& got = run.records[r][i];
      ASSERT_FALSE(got.values.empty()) << c.name;
      EXPECT_EQ(got.values.back(), want_path[i] == AllReducePath::kNccl ? 1.0f : 0.0f) << c.name << " path";
      if (i == 3) {
        EXPECT_EQ(got.code, absl::StatusCode::kInvalidArgument) << c.name << " on rank " << r;
        continue;
      }
      ASSERT_EQ(got.code, absl::StatusCode::kOk) << c.name << " on rank " << r;
      ASSERT_EQ(got.values.size(), c.values + 1) << c.name;
      // Bitwise the same on every rank.
      EXPECT_EQ(0, std::memcmp(got.values.data(), run.records[0][i].values.data(), c.values * 4))
          << c.name << ": rank " << r << " differs from rank 0";
    }
    if (i == 3) continue;
    const std::vector<float>& got = run.records[0][i].values;
    if (i == 5) {
      for (int r = 0; r < world; ++r) EXPECT_TRUE(std::isnan(run.records[r][i].values[777])) << "rank " << r;
      EXPECT_FALSE(std::isnan(got[776])) << c.name;
      continue;
    }
    if (want_path[i] == AllReducePath::kKvt) {
      const std::vector<float> want = Reference(c, i, world);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), c.values * 4)) << c.name << ": not the CPU reference";
      continue;
    }
    // NCCL's sum: each of the world - 1 additions rounds to the type, and so may the final store.
    std::vector<double> sum, magnitude;
    ExactSums(c, i, world, &sum, &magnitude);
    const double unit = c.type == DataType::kFloat32 ? std::ldexp(1.0, -24)
                        : c.type == DataType::kBfloat16 ? std::ldexp(1.0, -8)
                                                        : std::ldexp(1.0, -11);
    size_t bad = 0, first = 0;
    for (size_t k = 0; k < c.values; ++k) {
      const double bound = world * unit * magnitude[k] + 1e-30;
      if (!(std::fabs(got[k] - sum[k]) <= bound) && bad++ == 0) first = k;
    }
    EXPECT_EQ(bad, 0u) << c.name << ": " << bad << " sums outside world x unit roundoff x sum|x|, first at " << first
                       << ": got " << got[first] << ", exact " << sum[first];
  }
}

// Creates a communicator on each of `world` ranks with options_of(rank) and expects FAILED_PRECONDITION on all.
void ExpectCreateFailsOnEveryRank(int world, const std::function<CudaCommunicatorOptions(int)>& options_of) {
  ForkedRun run = RunForked(world, absl::Seconds(60), [&](ForkedRank& self) {
    absl::StatusOr<std::unique_ptr<CudaCommunicator>> comm = MakeCommunicator(self, options_of(self.rank));
    self.records.Write(comm.status(), {});
    return 0;
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(run.exits[r].ok()) << run.exits[r];
    ASSERT_EQ(run.records[r].size(), 1u);
    EXPECT_EQ(run.records[r][0].code, absl::StatusCode::kFailedPrecondition) << "rank " << r;
  }
}

TEST(CudaAllReduceOneShotTest, RanksThatDisagreeOnOneShotBytesFailCreateOnEveryRank) {
  SKIP_WITHOUT_CUDA();
  ExpectCreateFailsOnEveryRank(3, [](int rank) {
    return CudaCommunicatorOptions{.workspace_bytes = size_t{8} << 20,
                                   .one_shot_bytes = rank == 1 ? size_t{32} << 10 : size_t{64} << 10};
  });
}

TEST(CudaAllReduceNcclTest, ALibraryThatDoesNotLoadFailsCreateOnEveryRank) {
  SKIP_WITHOUT_CUDA();
  // NCCL is never initialized here, so the two ranks may share a GPU. Rank 0 points at a library that does not
  // exist; rank 1 at one that is not NCCL.
  ExpectCreateFailsOnEveryRank(2, [](int rank) {
    return CudaCommunicatorOptions{.workspace_bytes = 1 << 20,
                                   .nccl_library = rank == 0 ? "/nonexistent/libnccl.so.2" : "libc.so.6"};
  });
}

TEST(CudaAllReduceNcclTest, RanksThatDisagreeOnNcclFailCreateOnEveryRank) {
  SKIP_WITHOUT_NCCL();
  ExpectCreateFailsOnEveryRank(2, [](int rank) {
    return CudaCommunicatorOptions{
        .device = rank, .workspace_bytes = 1 << 20, .nccl_library = rank == 0 ? NcclPath() : ""};
  });
}

}  // namespace
}  // namespace kvt::collective
