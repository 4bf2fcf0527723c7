// The NATS sink's inbox (nats_inbox.hpp).
#include "sinks/nats_inbox.hpp"

#include <nats/nats.h>

#include <chrono>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace outbox {

NatsInbox *NatsInbox::Create() { return new NatsInbox(); }

NatsInbox::~NatsInbox() {
  for (natsMsg *msg : queued_) natsMsg_Destroy(msg);
}

void NatsInbox::Release() noexcept {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void NatsInbox::OnMessage(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                          void *closure) noexcept {
  (void)nc;
  (void)sub;
  if (msg == nullptr) return;
  auto *inbox = static_cast<NatsInbox *>(closure);
  try {
    const std::lock_guard<std::mutex> lock(inbox->mu_);
    inbox->queued_.push_back(msg);
  } catch (...) {
    // Out of memory: the answer is lost, and its message waits for it in
    // vain until its acknowledgement timeout (then it is sent again).
    natsMsg_Destroy(msg);
    inbox->dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  inbox->ready_.notify_one();
}

void NatsInbox::OnComplete(void *closure) noexcept { static_cast<NatsInbox *>(closure)->Release(); }

void NatsInbox::Take(int64_t wait_ms, std::vector<NatsMsgPtr> *out) {
  out->clear();
  std::unique_lock<std::mutex> lock(mu_);
  if (queued_.empty() && wait_ms > 0) {
    ready_.wait_for(lock, std::chrono::milliseconds(wait_ms), [this] { return !queued_.empty(); });
  }
  out->reserve(queued_.size());  // may throw: the answers then stay queued
  for (natsMsg *msg : queued_) out->emplace_back(msg);
  queued_.clear();
}

}  // namespace outbox
