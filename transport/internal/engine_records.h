// The records the link engine keeps per send, pending payload read and connect, and its counters: shared by the
// engine's two source files (engine.cc, the progress thread; engine_calls.cc, the calls other threads make).
#ifndef KVT_TRANSPORT_INTERNAL_ENGINE_RECORDS_H_
#define KVT_TRANSPORT_INTERNAL_ENGINE_RECORDS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "transport/chunk_header.h"
#include "transport/internal/control_message.h"
#include "transport/internal/engine.h"
#include "transport/internal/mutex.h"

namespace kvt::transport::internal {

struct Engine::SendRecord {
  MessageKind kind = MessageKind::kChunk;
  LinkId link = 0;
  uint64_t transfer_id = 0;  // chunks only
  uint8_t stage = 0;         // chunks only
  bool raw = false;          // SendRawChunkForTest: belongs to no transfer
  std::array<uint8_t, kChunkHeaderBytes> chunk_header{};
  std::array<uint8_t, kControlMessageBytes> control{};
  std::vector<uint8_t> raw_header;
  std::vector<uint8_t> raw_payload;
};

struct Engine::PendingRead {
  LinkId link = 0;
  ChunkHeader header;
  PayloadBuffer payload;
  int64_t wire_bytes = 0;
};

struct Engine::ConnectWaiter {
  internal::Notification done;
  absl::Status status;  // written before done.Notify()
};

struct Engine::Counters {
  std::atomic<uint64_t> chunks_sent{0}, payload_bytes_sent{0}, anchor_chunks_sent{0}, promoted_chunks_sent{0};
  std::atomic<uint64_t> chunks_received{0}, payload_bytes_received{0};
  std::atomic<uint64_t> rejected_malformed{0}, rejected_bad_crc{0}, rejected_unknown_transfer{0};
  std::atomic<uint64_t> rejected_out_of_bounds{0}, rejected_over_window{0};
  std::atomic<uint64_t> links_down{0}, transfers_stalled{0};
  std::atomic<int64_t> max_inflight{0}, max_buffered{0};
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_ENGINE_RECORDS_H_
