// The link engine: the one implementation of Transport, over any Wire. It owns the progress thread, which
// creates, drives and destroys the wire and runs every peer link: lanes (LaneScheduler), pacing (TokenBucket),
// credit-based flow control, heartbeats and stall detection. Other threads hand it work through a command queue
// and wait for the answer; inbound chunks go to a TransferTable that consumer threads read.
//
// Data flow, sender: Send -> command -> OutboundTransfer + streams on the link's lanes -> each progress round, per
// link, while the scheduler has a chunk, the window has credit and the bucket has tokens: CRC32C (computed
// ahead by the SendCrcPrecomputer's thread when it is ready), header, Wire::Send. Receiver: Wire::OnMessage -> header checks -> TransferTable::Admit (bounds) -> payload read ->
// CRC check (on the ChunkVerifier's thread) -> TransferTable::Deliver -> Receive or ReceiveAny; dropping a
// ReceivedChunk returns credit -> kCredit to the sender.
#ifndef KVT_TRANSPORT_INTERNAL_ENGINE_H_
#define KVT_TRANSPORT_INTERNAL_ENGINE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/internal/chunk_verifier.h"
#include "transport/internal/control_message.h"
#include "transport/internal/peer_link.h"
#include "transport/internal/send_crc_precomputer.h"
#include "transport/internal/wire.h"
#include "transport/options.h"
#include "transport/internal/transfer_table.h"
#include "transport/transport.h"
#include "transport/internal/mutex.h"

namespace kvt::transport::internal {

class Engine final : public Transport, private WireEvents {
 public:
  // Makes the wire on the progress thread. `wake` may be called from any thread to end an idle wait early.
  using WireFactory =
      std::function<absl::StatusOr<std::unique_ptr<Wire>>(WireEvents* events, std::function<void()> wake)>;

  // Validates `options`, starts the progress thread and builds the wire there; returns its error if it fails.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(Options options, Capabilities capabilities,
                                                        WireFactory make_wire);
  // Fails every link (UNAVAILABLE), waits (bounded) for the wire to release caller memory, stops the thread.
  ~Engine() override;

  std::string address() const override { return address_; }
  Capabilities capabilities() const override { return capabilities_; }
  absl::StatusOr<PeerId> Connect(const std::string& address, absl::Duration timeout) override;
  absl::StatusOr<std::shared_ptr<SendHandle>> Send(PeerId peer, uint64_t transfer_id,
                                                   std::vector<OutboundStream> streams) override;
  absl::Status Expect(uint64_t transfer_id, std::vector<StreamBounds> streams, uint64_t link_group = 0,
                      std::shared_ptr<const void> placement_owner = nullptr) override;
  absl::StatusOr<ReceivedChunk> Receive(uint64_t transfer_id, absl::Duration timeout) override;
  absl::StatusOr<InboundEvent> ReceiveAny(absl::Duration timeout) override;
  void Cancel(uint64_t transfer_id) override;
  TransportStats stats() const override;

  // For hostile-peer tests only: puts `header` and `payload` on `peer`'s link as one chunk message as they are,
  // bypassing lanes, pacing and credit.
  absl::Status SendRawChunkForTest(PeerId peer, std::vector<uint8_t> header, std::vector<uint8_t> payload);
  // For failure tests only: stops answering on every link (no credit, no heartbeat) while the process lives on,
  // as a hung peer would.
  void FreezeForTest();

 private:
  struct SendRecord;
  struct PendingRead;
  struct ConnectWaiter;
  struct Counters;

  Engine(Options options, Capabilities capabilities);

  void Run();
  // Runs `fn` on the progress thread and waits for it. UNAVAILABLE when the engine is stopping.
  absl::Status RunOnLoop(std::function<void()> fn);
  void Wake();
  int RunCommands();
  void IdleWait(absl::Duration max_wait);
  int ServiceLink(PeerLink& link, absl::Time now, absl::Time* next_timer);
  void SendChunk(PeerLink& link, const LaneScheduler::Cut& cut, absl::Time now);
  // A send the wire refuses takes the link down as a failure, or, when `peer_shutdown` (answering the peer's
  // goodbye), as the peer's orderly close.
  void SendControl(PeerLink& link, const ControlMessage& m, absl::Time now, bool peer_shutdown = false);
  void HandleChunk(PeerLink& link, absl::Span<const uint8_t> header, InboundPayload& payload);
  // Hands a received chunk to the verifier; DeliverVerified takes it from there once checked.
  void FinishChunk(LinkId link, const ChunkHeader& h, PayloadBuffer payload, int64_t wire_bytes);
  int DeliverVerified();
  void RejectChunk(LinkId link, uint64_t transfer_id, const absl::Status& status, int64_t wire_bytes);
  void FailTransfer(OutboundTransfer& t, absl::Status status);
  void MaybeFinish(uint64_t transfer_id);
  // Why a link goes down: a failure is logged as a warning; the peer's announced shutdown (kGoodbye) at info level;
  // this transport's own shutdown only at debug level.
  enum class DownCause { kFailure, kPeerShutdown, kShutdown };
  void LinkDown(PeerLink& link, absl::Status status, DownCause cause = DownCause::kFailure);
  void Shutdown();
  PeerLink* FindLink(LinkId id);

  // WireEvents, on the progress thread.
  void OnLinkUp(LinkId link, bool inbound) override;
  void OnLinkDown(LinkId link, absl::Status status) override;
  void OnMessage(LinkId link, MessageKind kind, absl::Span<const uint8_t> header, InboundPayload& payload) override;
  void OnPayloadRead(uint64_t cookie, absl::Status status) override;
  void OnSendDone(uint64_t cookie, absl::Status status) override;

  // Constant after construction.
  const Options options_;
  const Capabilities capabilities_;
  const Clock* const clock_;
  std::string address_;  // set before Create returns

  TransferTable table_;
  std::unique_ptr<Counters> counters_;
  std::atomic<bool> frozen_{false};
  // Set by Shutdown (progress thread only): a peer closing its side while our goodbyes are out is part of our
  // shutdown, not a failure.
  bool shutting_down_ = false;

  // Command queue, the only way in from other threads.
  internal::Mutex cmd_mu_;
  std::vector<std::function<void()>> commands_ ABSL_GUARDED_BY(cmd_mu_);
  bool wake_ ABSL_GUARDED_BY(cmd_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(cmd_mu_) = false;

  // Checks received chunks' CRC32C off the progress thread; wakes it when a chunk is done. Started in the
  // constructor, stopped by the progress thread on shutdown (or by the destructor if it never ran).
  std::unique_ptr<ChunkVerifier> verifier_;

  // State below is touched only by the progress thread.
  // Computes outbound chunks' CRCs ahead of the scheduler; null once shut down.
  std::unique_ptr<SendCrcPrecomputer> send_crcs_;
  std::unique_ptr<Wire> wire_;
  absl::flat_hash_map<LinkId, std::unique_ptr<PeerLink>> links_;
  absl::flat_hash_map<uint64_t, OutboundTransfer> outbound_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<SendRecord>> send_records_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<PendingRead>> pending_reads_;
  absl::flat_hash_map<LinkId, std::shared_ptr<ConnectWaiter>> connect_waiters_;
  uint64_t next_cookie_ = 1;

  std::thread thread_;
};

}  // namespace kvt::transport::internal

#endif  // KVT_TRANSPORT_INTERNAL_ENGINE_H_
