#include "server/host_buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/cuda_util.h"
#include "common/mutex.h"

namespace kvt::server {
namespace {

constexpr size_t kGranule = size_t{2} << 20;  // 2 MiB: a huge page, and the rounding that lets layers share
// A kept buffer serves a request of down to a quarter of its size: an int4 request after an int8 one (layers 1.7x
// smaller) must reuse the int8 one's pinned buffers, not pin new ones (allowing only 1.5x made every int4 layer
// pin memory on a 4-H200 host and took its encode from 59 to 378 ms).
constexpr size_t kMaxReuse = 4;

// One allocation, pinned (cudaMallocHost) or pageable (an anonymous mapping advised to use huge pages).
class Allocation final : public HostBuffer {
 public:
  static std::unique_ptr<Allocation> Make(size_t bytes, HostMemory memory) {
    auto a = std::unique_ptr<Allocation>(new Allocation());
    if (memory == HostMemory::kPinned) {
      absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> pinned =
          PinnedHostBuffer::Create(bytes);
      if (pinned.ok()) {
        a->pinned_ = *std::move(pinned);
        a->data_ = a->pinned_->data();
        a->size_ = bytes;
        return a;
      }
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    madvise(p, bytes, MADV_HUGEPAGE);  // fewer faults and TLB misses on first touch; advice only
    a->mapped_ = true;
    a->data_ = static_cast<uint8_t*>(p);
    a->size_ = bytes;
    return a;
  }
  ~Allocation() override {
    if (mapped_) munmap(data_, size_);
  }
  uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }
  bool pinned() const override { return pinned_ != nullptr; }

 private:
  Allocation() = default;
  std::unique_ptr<PinnedHostBuffer> pinned_;
  bool mapped_ = false;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Pool final : public HostBufferPool, public std::enable_shared_from_this<Pool> {
 public:
  explicit Pool(const HostBufferPoolOptions& options) : options_(options) {
    reaper_ = std::thread([this] { Reap(); });
  }
  // Runs when the last buffer and the owner's reference are gone; frees what is kept and what waits for the reaper.
  ~Pool() override {
    {
      kvt::MutexLock lock(&mu_);
      stopping_ = true;
    }
    reaper_.join();
  }

  std::shared_ptr<HostBuffer> Acquire(size_t bytes, HostMemory memory) override {
    bytes = std::max<size_t>(1, (bytes + kGranule - 1) / kGranule * kGranule);
    std::unique_ptr<Allocation> taken;
    {
      kvt::MutexLock lock(&mu_);
      ++stats_.acquired;
      std::vector<std::unique_ptr<Allocation>>& free = free_[Index(memory)];
      auto best = free.end();
      for (auto it = free.begin(); it != free.end(); ++it) {
        const size_t size = (*it)->size();
        if (size >= bytes && size <= kMaxReuse * bytes && (best == free.end() || size < (*best)->size())) best = it;
      }
      if (best != free.end()) {
        taken = std::move(*best);
        free.erase(best);
        stats_.kept_bytes -= taken->size();
        stats_.leased_bytes += taken->size();
        ++stats_.reused;
      }
    }
    if (taken == nullptr) {
      taken = Allocation::Make(bytes, memory);  // outside the lock: pinning waits for the device
      if (taken == nullptr) return nullptr;
      kvt::MutexLock lock(&mu_);
      stats_.allocated_bytes += taken->size();
      stats_.leased_bytes += taken->size();
    }
    // The deleter holds the pool, so a buffer can come back after its owner dropped the pool.
    std::shared_ptr<Pool> self = shared_from_this();
    Allocation* raw = taken.release();
    const HostMemory kind = raw->pinned() ? HostMemory::kPinned : HostMemory::kPageable;
    return std::shared_ptr<HostBuffer>(raw, [self, kind](HostBuffer* b) {
      self->Release(std::unique_ptr<Allocation>(static_cast<Allocation*>(b)), kind);
    });
  }

  HostBufferPoolStats stats() const override {
    kvt::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  static int Index(HostMemory m) { return m == HostMemory::kPinned ? 1 : 0; }

  // Keeps `a` for reuse if it fits under the cap (dropping the largest kept ones of either kind would not help a
  // steady state, which asks for the same sizes again), else hands it to the reaper: freeing pinned memory waits
  // for the device, and the last reference to a buffer may be dropped on a hot thread or under someone's lock
  // (the data plane's table, a request's mutex).
  void Release(std::unique_ptr<Allocation> a, HostMemory kind) {
    kvt::MutexLock lock(&mu_);
    stats_.leased_bytes -= a->size();
    if (stats_.kept_bytes + a->size() <= options_.max_kept_bytes) {
      stats_.kept_bytes += a->size();
      free_[Index(kind)].push_back(std::move(a));
    } else {
      to_free_.push_back(std::move(a));
    }
  }

  void Reap() {
    while (true) {
      std::vector<std::unique_ptr<Allocation>> batch;
      {
        kvt::MutexLock lock(&mu_);
        mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !to_free_.empty(); });
        batch.swap(to_free_);
        if (batch.empty() && stopping_) {
          for (auto& f : free_) f.clear();  // the pool is going: what it kept goes too
          return;
        }
      }
      batch.clear();  // frees, outside the lock
    }
  }

  const HostBufferPoolOptions options_;
  mutable kvt::Mutex mu_;
  std::vector<std::unique_ptr<Allocation>> free_[2] ABSL_GUARDED_BY(mu_);  // [pageable, pinned]
  std::vector<std::unique_ptr<Allocation>> to_free_ ABSL_GUARDED_BY(mu_);  // for the reaper
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  HostBufferPoolStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread reaper_;
};

}  // namespace

std::shared_ptr<HostBufferPool> HostBufferPool::Create(const HostBufferPoolOptions& options) {
  return std::make_shared<Pool>(options);
}

}  // namespace kvt::server
