// The NATS sink's inbox: JetStream's answers handed from libnats's delivery
// thread to the sink's owner thread. Private to the NATS sink's files.
//
// Why a callback and not a synchronous subscription read with
// natsSubscription_NextMsg: NextMsg swallows a "no responders" status
// message (it destroys it and returns NATS_NO_RESPONDERS), so the reader
// cannot tell which of many messages in flight had no responders. An
// asynchronous subscription's handler gets that message with its subject.
// The handler does nothing but queue the message under a mutex (thread-safe,
// PostgreSQL-free code, and nothing else of ours): every answer is read and
// judged on the owner's thread.
//
// Lifetime: libnats may run the handler until the subscription's completion
// callback (natsSubscription_SetOnCompleteCB), which can come after the
// sink has closed the connection and gone. So the inbox counts its owners:
// the sink, and the subscription from its creation until its completion
// callback; the last one to let go deletes it.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace outbox {

// Owns a natsMsg.
struct NatsMsgDeleter {
  void operator()(natsMsg *msg) const { natsMsg_Destroy(msg); }
};
using NatsMsgPtr = std::unique_ptr<natsMsg, NatsMsgDeleter>;

class NatsInbox {
 public:
  // A new inbox with one owner (the caller). Throws std::bad_alloc.
  static NatsInbox *Create();

  void Retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release() noexcept;

  // libnats's handlers (its delivery thread). `closure` is the inbox.
  // OnComplete releases the subscription's reference.
  static void OnMessage(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                        void *closure) noexcept;
  static void OnComplete(void *closure) noexcept;

  // The owner's thread: waits at most wait_ms for an answer (0: does not
  // wait), then moves every queued answer into *out (cleared first).
  // Throws std::bad_alloc.
  void Take(int64_t wait_ms, std::vector<NatsMsgPtr> *out);

  // Answers lost because the handler ran out of memory (their messages
  // wait for their acknowledgement in vain and are retried).
  uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  NatsInbox() = default;
  ~NatsInbox();

  std::atomic<int> refs_{1};
  std::atomic<uint64_t> dropped_{0};
  std::mutex mu_;
  std::condition_variable ready_;
  std::vector<natsMsg *> queued_;  // owned; guarded by mu_
};

}  // namespace outbox
