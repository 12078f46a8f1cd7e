// A set of disjoint half-open byte ranges, coalesced; used to reject a chunk that overlaps bytes already
// received. Not thread-safe.
#ifndef KVT_TRANSPORT_INTERNAL_RANGE_SET_H_
#define KVT_TRANSPORT_INTERNAL_RANGE_SET_H_

#include <cstdint>
#include <iterator>
#include <map>

namespace kvt::transport::internal {

class RangeSet {
 public:
  // Adds [begin, end) (begin < end) unless it overlaps a range already present; returns whether it added.
  bool InsertIfDisjoint(uint64_t begin, uint64_t end) {
    auto next = ranges_.lower_bound(begin);  // first range starting at or after begin
    if (next != ranges_.end() && next->first < end) return false;
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->second > begin) return false;
      if (prev->second == begin) {  // coalesce with the range before
        begin = prev->first;
        ranges_.erase(prev);
      }
    }
    if (next != ranges_.end() && next->first == end) {  // coalesce with the range after
      end = next->second;
      ranges_.erase(next);
    }
    ranges_[begin] = end;
    return true;
  }
  size_t pieces() const { return ranges_.size(); }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_RANGE_SET_H_
