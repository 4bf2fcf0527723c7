// The Kafka sink's delivery reports: each settles its message's outcome in
// the batch it belongs to; Collect waits for them; timeouts are explained by
// asking the brokers; batches that get no more reports are given up. Runs on
// the owner's thread only: librdkafka serves the reports from rd_kafka_poll
// and rd_kafka_flush, which only the owner calls (kafka_sink_class.hpp).
//
// Collect waits with rd_kafka_flush rather than rd_kafka_poll when its batch
// is the only one open: librdkafka 2.0 ignores linger.ms while a flush call is
// in progress (measured: a message with linger.ms=500 is acknowledged in
// under 1 ms by a flush loop, after 500 ms by a poll loop), and flush returns
// as soon as nothing is left. With later batches open, flush would also wait
// for them, so it polls in short slices instead.
#include "sinks/kafka_sink_class.hpp"
#include "sinks/kafka_errors.hpp"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace outbox {

namespace {

// Longest single wait inside Collect, so `interrupted` is checked this often.
constexpr int kWaitSliceMs = 100;
// Collect's wait while later batches are open (see the file comment).
constexpr int kPipelinedSliceMs = 2;
// How long to wait for a broker's answer about a topic whose messages timed
// out (ExplainTimeouts).
constexpr int kTopicProbeMs = 500;
// After a purge, how long to serve the purged messages' delivery reports.
constexpr int kPurgeDrainMs = 1000;

const char kNothing[] = "";

}  // namespace

void KafkaSink::OnDelivery(rd_kafka_t *, const rd_kafka_message_t *message, void *opaque) noexcept {
  static_cast<KafkaSink *>(opaque)->Record(message);
}

void KafkaSink::Record(const rd_kafka_message_t *message) noexcept {
  const rd_kafka_resp_err_t err = message->err;
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) connection_ = Connection::kConnected;
  const auto tag = reinterpret_cast<uintptr_t>(message->_private);
  Batch *batch = nullptr;
  for (Batch &b : open_) {
    if (b.generation == (tag >> kSlotBits)) batch = &b;
  }
  if (batch == nullptr) return;  // an abandoned batch's
  const size_t slot = tag & kSlotMask;
  if (slot >= batch->settled.size() || batch->settled[slot] != 0) return;
  --batch->unsettled;
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    Settle(batch, slot, DeliveryStatus::kDelivered, kNothing);
  } else if (purge_reason_ != nullptr &&
             (err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)) {
    Settle(batch, slot, DeliveryStatus::kRetriable, purge_reason_);
  } else {
    try {
      const DeliveryStatus status = StatusOf(err);
      std::string text = KafkaErrorText(err);
      if (status == DeliveryStatus::kTargetRefused && message->rkt != nullptr) {
        text += " (topic \"";  // which topic: the DBA's next question
        text += rd_kafka_topic_name(message->rkt);
        text += "\")";
      }
      Settle(batch, slot, status, std::move(text));
      if (err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT && message->rkt != nullptr && !NeedsRecreate()) {
        batch->timed_out.push_back(Batch::TimedOut{slot, message->rkt, message->partition});
      }
    } catch (...) {
      Settle(batch, slot, StatusOf(err), rd_kafka_err2name(err));
    }
  }
}

DeliveryStatus KafkaSink::StatusOf(rd_kafka_resp_err_t err) const {
  // After a fatal error nothing is judged on this producer: the owner
  // recreates it, and the next one finds out whether a message is refused.
  if (NeedsRecreate()) return DeliveryStatus::kRetriable;
  return ClassifyKafkaError(err);
}

void KafkaSink::Settle(Batch *batch, size_t slot, DeliveryStatus status,
                       const char *error) noexcept {
  batch->settled[slot] = 1;
  Delivery &delivery = batch->out[slot];
  delivery.status = status;
  delivery.answered_at_us = UnixNowUs();
  try {
    delivery.error = error;
  } catch (...) {
    delivery.error.clear();
  }
}

void KafkaSink::Settle(Batch *batch, size_t slot, DeliveryStatus status,
                       std::string &&error) noexcept {
  batch->settled[slot] = 1;
  batch->out[slot].status = status;
  batch->out[slot].error = std::move(error);
  batch->out[slot].answered_at_us = UnixNowUs();
}

void KafkaSink::Collect(uint64_t ticket, InterruptCheck interrupted) {
  (void)Wait(ticket, -1, interrupted);
}

bool KafkaSink::CollectFor(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) {
  return Wait(ticket, wait_ms < 0 ? 0 : wait_ms, interrupted);
}

// Collect and CollectFor: wait_ms < 0 waits until the batch's deadline.
bool KafkaSink::Wait(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) {
  auto it = std::find_if(open_.begin(), open_.end(),
                         [ticket](const Batch &b) { return b.ticket == ticket; });
  if (it == open_.end()) return true;  // settled within Send, or abandoned
  Batch *batch = &*it;
  const Clock::time_point wait_until =
      wait_ms < 0 ? batch->deadline : std::min(batch->deadline, Clock::now() + Millis(wait_ms));
  const char *reason = nullptr;
  bool timed_out = false;
  bool first = true;
  while (batch->unsettled > 0) {
    const Clock::time_point now = Clock::now();
    if (now >= batch->deadline) {
      reason = "timed out";
      timed_out = true;
      break;
    }
    const auto left = std::chrono::duration_cast<Millis>(wait_until - now).count();
    // Still open: the caller comes back. Never for Collect (wait_ms < 0),
    // which waits until the deadline itself (left may round down to 0 in
    // its last millisecond).
    if (left <= 0 && !first && wait_ms >= 0) return false;
    first = false;
    const int slice = static_cast<int>(std::max<long long>(0, left));
    // A look without waiting (the idle publisher asking for late answers,
    // every few ms) only serves the reports that came in: rd_kafka_flush
    // would also wake every broker thread to send what lingers, each time.
    if (open_.size() == 1 && slice > 0) {
      rd_kafka_flush(rk_, std::min(kWaitSliceMs, slice));
    } else {
      rd_kafka_poll(rk_, std::min(kPipelinedSliceMs, slice));
    }
    if (batch->unsettled == 0) break;
    if (rd_kafka_outq_len(rk_) == 0) {
      // librdkafka holds nothing more (a message is counted until its report
      // has been served): a report went astray. Never expected; do not spin.
      reason = "no delivery report";
      break;
    }
    if (interrupted != nullptr && interrupted()) {
      reason = "interrupted";
      break;
    }
  }
  if (batch->unsettled > 0 && timed_out) {
    GiveUp(batch);
  } else if (batch->unsettled > 0) {
    Abandon(reason != nullptr ? reason : "timed out");
  }
  // Not when giving up (interrupted: shutting down, or no report coming).
  if (reason == nullptr) {
    ExplainTimeouts(batch);
  } else {
    batch->timed_out.clear();
  }
  open_.erase(it);  // Abandon, Record and ExplainTimeouts never add or remove batches
  return true;
}

// Messages that timed out in librdkafka's queue may have waited for a topic
// the cluster does not have (librdkafka holds them until message.timeout.ms
// before it gives up on a topic's metadata), for a partition without a
// leader, or for brokers that are down. Only the brokers can tell: ask them
// about each such topic. A broker that answers "unknown topic" or "not
// authorised" makes those messages kTargetRefused (an attempt each; the
// sink is not down); one that answers that the message's partition has no
// leader makes them kTargetDown (no attempt; the topic waits out a backoff
// of its own, the sink is not down: the cluster answered, and its other
// topics go on); no answer leaves them retriable (an outage). Never throws.
void KafkaSink::ExplainTimeouts(Batch *batch) noexcept {
  if (batch->timed_out.empty()) return;
  // No broker reachable: nobody can answer, and asking would only wait.
  if (connection_ == Connection::kDown) {
    batch->timed_out.clear();
    return;
  }
  // One request for every topic this producer knows (not one per topic): at
  // most kTopicProbeMs, however many topics timed out.
  const struct rd_kafka_metadata *md = nullptr;
  if (rd_kafka_metadata(rk_, 0, nullptr, &md, kTopicProbeMs) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    md = nullptr;  // no broker answered: nothing learnt
  }
  try {
    if (md != nullptr) {
      for (const Batch::TimedOut &timed_out : batch->timed_out) {
        const char *name = rd_kafka_topic_name(timed_out.topic);
        for (int t = 0; t < md->topic_cnt; ++t) {
          const rd_kafka_metadata_topic &m = md->topics[t];
          if (m.topic == nullptr || strcmp(m.topic, name) != 0) continue;
          if (ClassifyKafkaError(m.err) == DeliveryStatus::kTargetRefused) {
            std::string text = KafkaErrorText(m.err);
            text += " (topic \"";
            text += name;
            text += "\")";
            Settle(batch, timed_out.slot, DeliveryStatus::kTargetRefused, text.c_str());
            break;
          }
          for (int p = 0; p < m.partition_cnt; ++p) {
            const rd_kafka_metadata_partition &part = m.partitions[p];
            if (part.id != timed_out.partition) continue;
            if (part.leader < 0 || part.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
              std::string text = "partition " + std::to_string(part.id) + " of topic \"" + name +
                                 "\" has no leader (" +
                                 KafkaErrorText(part.err != RD_KAFKA_RESP_ERR_NO_ERROR
                                                    ? part.err
                                                    : RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE) +
                                 ")";
              Settle(batch, timed_out.slot, DeliveryStatus::kTargetDown, text.c_str());
            }
            break;
          }
          break;
        }
      }
    }
  } catch (...) {
    // Out of memory: they stay retriable, as before the question.
  }
  if (md != nullptr) rd_kafka_metadata_destroy(md);
  batch->timed_out.clear();
}

void KafkaSink::Abandon(const char *reason) noexcept {
  // Purged messages come back with _PURGE_QUEUE/_PURGE_INFLIGHT reports,
  // which Record turns into `reason`. One purged in flight may still have
  // been written: retrying it is at-least-once, as the contract allows.
  // A purge takes everything librdkafka holds, so every open batch ends here.
  purge_reason_ = reason;
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  const Clock::time_point until = Clock::now() + Millis(kPurgeDrainMs);
  auto unsettled = [this] {
    for (const Batch &b : open_) {
      if (b.unsettled > 0) return true;
    }
    return false;
  };
  while (unsettled() && Clock::now() < until) rd_kafka_poll(rk_, 10);
  // Whatever is still unreported gets `reason`; its report, should one come,
  // finds its slot settled and is ignored.
  for (Batch &b : open_) {
    for (size_t slot = 0; slot < b.settled.size(); ++slot) {
      if (b.settled[slot] == 0) Settle(&b, slot, DeliveryStatus::kRetriable, reason);
    }
    b.unsettled = 0;
  }
  purge_reason_ = nullptr;
}

// A batch past its deadline: librdkafka still holds some of its messages
// (in flight to a broker that does not answer, with request.timeout.ms above
// message.timeout.ms plus the margin, or message.timeout.ms=0). Only this
// batch gives up: a purge would take every open batch with it, failing
// messages that other brokers are answering right now (the next attempt
// duplicates whatever of them was written) and making a working sink look
// down. Its messages stay with librdkafka, ahead of any retry of theirs in
// their partition's queue, so a retry never overtakes the original; their
// reports, should they come, find no open batch and are ignored (at least
// once, as the contract allows). The next Send that finds no batch open
// purges what is left (leftovers_), as does the destructor.
void KafkaSink::GiveUp(Batch *batch) noexcept {
  std::string text;
  try {
    text = "timed out: no delivery report within " + std::to_string(wait_limit_ms_) +
           " ms (message.timeout.ms plus " + std::to_string(limits_.margin_ms) + " ms)";
  } catch (...) {
  }
  for (size_t slot = 0; slot < batch->settled.size(); ++slot) {
    if (batch->settled[slot] == 0) {
      Settle(batch, slot, DeliveryStatus::kRetriable, text.empty() ? "timed out" : text.c_str());
    }
  }
  batch->unsettled = 0;
  leftovers_ = true;
}

void KafkaSink::AbandonAll(const char *reason) noexcept {
  if (open_.empty()) return;
  Abandon(reason);  // settles every open batch's missing outcomes
  open_.clear();    // and no report can reach their arrays any more
}

}  // namespace outbox
