#include "server/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvt::server {
namespace {

// A segment created for one test and unlinked when it ends.
class ScopedSegment {
 public:
  explicit ScopedSegment(uint64_t size) : name_(absl::StrCat("/kvt-test-", getpid(), "-", counter_++)) {
    int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    close(fd);
  }
  ~ScopedSegment() { shm_unlink(name_.c_str()); }
  const std::string& name() const { return name_; }

 private:
  static inline int counter_ = 0;
  std::string name_;
};

TEST(ShmRegion, WritesThroughOneMappingAreSeenThroughAnother) {
  ScopedSegment seg(4096);
  absl::StatusOr<std::unique_ptr<ShmRegion>> a = ShmRegion::Open(seg.name(), 4096);
  absl::StatusOr<std::unique_ptr<ShmRegion>> b = ShmRegion::Open(seg.name(), 4096);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<absl::Span<uint8_t>> wa = (*a)->Bytes(100, 4);
  ASSERT_TRUE(wa.ok());
  std::memcpy(wa->data(), "kvt!", 4);
  absl::StatusOr<absl::Span<uint8_t>> rb = (*b)->Bytes(100, 4);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(std::memcmp(rb->data(), "kvt!", 4), 0);
}

TEST(ShmRegion, AccessOutsideTheRegionIsOutOfRange) {
  ScopedSegment seg(4096);
  absl::StatusOr<std::unique_ptr<ShmRegion>> r = ShmRegion::Open(seg.name(), 4096);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->Bytes(0, 4096).ok());
  EXPECT_TRUE((*r)->Bytes(4096, 0).ok());
  EXPECT_EQ((*r)->Bytes(4095, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*r)->Bytes(4097, 0).status().code(), absl::StatusCode::kOutOfRange);
  // offset + length wraps around 2^64: must not pass the check.
  EXPECT_EQ((*r)->Bytes(16, UINT64_MAX - 8).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ShmRegion, RegisteringMoreThanTheSegmentHoldsIsOutOfRange) {
  ScopedSegment seg(4096);
  EXPECT_EQ(ShmRegion::Open(seg.name(), 8192).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ShmRegion, MissingSegmentIsNotFound) {
  EXPECT_EQ(ShmRegion::Open(absl::StrCat("/kvt-test-missing-", getpid()), 16).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ShmRegion, MalformedNamesAndZeroSizeAreInvalid) {
  for (const char* bad : {"", "/", "noslash", "/a/b", "//x"}) {
    EXPECT_EQ(ShmRegion::Open(bad, 16).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ShmRegion::Open(std::string(300, 'a').insert(0, "/"), 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  ScopedSegment seg(64);
  EXPECT_EQ(ShmRegion::Open(seg.name(), 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt::server
