// The Kafka sink: one librdkafka producer, driven only from the owner's thread.
//
// librdkafka runs threads of its own, but every callback installed here runs
// inside rd_kafka_poll/rd_kafka_flush on the thread that calls them, which is
// always the owner: delivery reports and error events are served from the main
// queue, and log lines join them there because log.queue=true and
// rd_kafka_set_log_queue(rk, NULL). So the sink's state needs no lock, and no
// librdkafka thread ever runs our code.
//
// Pipelining: Send produces a batch and returns; Collect waits for the oldest
// open batch's reports. Several batches may be open, so librdkafka keeps its
// in-flight requests busy while the publisher claims and records the next.
// Each delivery report carries its batch's generation and its index in it.
//
// Collect waits with rd_kafka_flush rather than rd_kafka_poll when its batch
// is the only one open: librdkafka 2.0 ignores linger.ms while a flush call is
// in progress (measured: a message with linger.ms=500 is acknowledged in
// under 1 ms by a flush loop, after 500 ms by a poll loop), and flush returns
// as soon as nothing is left. With later batches open, flush would also wait
// for them, so it polls in short slices instead.
#include "sinks/kafka_sink.hpp"
#include "sinks/sink_options.hpp"
#include "core/log_buffer.hpp"

#include "core/names.hpp"

#include <librdkafka/rdkafka.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace outbox {

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Our defaults (sink.hpp, contract "What arrives at the broker"), set before
// the user's options so that the user wins.
constexpr const char *kDefaults[][2] = {
    {"enable.idempotence", "true"},    {"acks", "all"},
    {"partitioner", "murmur2_random"}, {"linger.ms", "1"},
    {"message.timeout.ms", "10000"},
};

// Longest single wait inside Collect, so `interrupted` is checked this often.
constexpr int kWaitSliceMs = 100;
// Collect's wait while later batches are open (see the file comment).
constexpr int kPipelinedSliceMs = 2;
// Wait while librdkafka's queue is full before producing again.
constexpr int kQueueFullWaitMs = 10;
// How long to wait for a broker's answer about a topic whose messages timed
// out (ExplainTimeouts).
constexpr int kTopicProbeMs = 500;
// After a purge, how long to serve the purged messages' delivery reports.
constexpr int kPurgeDrainMs = 1000;
// Destructor: how long librdkafka may take to account for purged messages.
constexpr int kDestroyFlushMs = 1000;

// A delivery report's opaque: the batch generation in the high half of a
// pointer, the slot in the low half. A report whose generation is not an
// open batch's belongs to a batch already given up on.
constexpr unsigned kSlotBits = sizeof(uintptr_t) * 4;
constexpr uintptr_t kSlotMask = (uintptr_t{1} << kSlotBits) - 1;
constexpr size_t kMaxChunk = kSlotMask;

const char kNothing[] = "";

// librdkafka takes a null pointer for "no value" (a null key, a tombstone, a
// null header): an empty view passes NonNull's (core/sink.hpp).

// librdkafka ends some messages with a newline.
std::string Trimmed(const char *text) {
  std::string message(text);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

// syslog levels, as librdkafka logs them.
LogLevel FromSyslog(int level) {
  if (level <= 3) return LogLevel::kError;  // emerg, alert, crit, err
  if (level == 4) return LogLevel::kWarning;
  if (level <= 6) return LogLevel::kInfo;  // notice, info
  return LogLevel::kDebug;
}

// message.timeout.ms as librdkafka will apply it (a topic-level property:
// rd_kafka_conf_set stores it in the default topic configuration).
int MessageTimeoutMs(rd_kafka_conf_t *conf) {
  const rd_kafka_topic_conf_t *topic_conf = rd_kafka_conf_get_default_topic_conf(conf);
  char value[32];
  size_t size = sizeof value;
  if (topic_conf == nullptr ||
      rd_kafka_topic_conf_get(topic_conf, "message.timeout.ms", value, &size) != RD_KAFKA_CONF_OK) {
    return 10000;
  }
  char *end = nullptr;
  const long ms = std::strtol(value, &end, 10);
  if (end == value || ms < 0 || ms > 900000000) return 10000;
  return static_cast<int>(ms);
}

class KafkaSink final : public Sink {
 public:
  KafkaSink() : owner_(std::this_thread::get_id()) {}
  ~KafkaSink() override;
  KafkaSink(const KafkaSink &) = delete;
  KafkaSink &operator=(const KafkaSink &) = delete;

  // Builds the producer; false with *error set when librdkafka refuses.
  bool Init(const std::string &name, const SinkOptions &options, KafkaWaitLimits limits,
            std::string *error);

  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override;
  uint64_t Send(const OutMessage *messages, size_t n, Delivery *out,
                InterruptCheck interrupted) override;
  void Collect(uint64_t ticket, InterruptCheck interrupted) override;
  bool CollectFor(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) override;
  int64_t SettleLimitMs() const override { return wait_limit_ms_; }
  void AbandonAll(const char *reason) noexcept override;
  void Poll() override;
  std::vector<LogLine> TakeLogs() override;
  bool NeedsRecreate() const override;
  std::string State() const override;

 private:
  // What the latest evidence says about the brokers (see State()).
  enum class Connection { kConnecting, kConnected, kDown };

  static void OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf) noexcept;
  static void OnError(rd_kafka_t *rk, int err, const char *reason, void *opaque) noexcept;
  static void OnDelivery(rd_kafka_t *rk, const rd_kafka_message_t *message, void *opaque) noexcept;

  // A Send whose outcomes are not all collected yet.
  struct Batch {
    uint64_t ticket = 0;       // what Send returned for it; never reused
    uintptr_t generation = 0;  // masked to kSlotMask
    Delivery *out = nullptr;
    std::vector<unsigned char> settled;  // per slot: has an outcome
    size_t unsettled = 0;                // handed to librdkafka, no outcome yet
    Clock::time_point deadline;
    // Slots whose report said _MSG_TIMED_OUT, with their topic (see
    // ExplainTimeouts).
    std::vector<std::pair<size_t, rd_kafka_topic_t *>> timed_out;
  };
  bool Wait(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted);
  void ExplainTimeouts(Batch *batch) noexcept;

  void AddLog(LogLevel level, std::string text) noexcept;
  void Record(const rd_kafka_message_t *message) noexcept;
  DeliveryStatus StatusOf(rd_kafka_resp_err_t err) const;
  void SendBatch(Batch *batch, const OutMessage *messages, size_t n, InterruptCheck interrupted);
  rd_kafka_resp_err_t Produce(const OutMessage &message, uintptr_t tag);
  rd_kafka_topic_t *Topic(std::string_view target, rd_kafka_resp_err_t *err);
  static void Settle(Batch *batch, size_t slot, DeliveryStatus status, const char *error) noexcept;
  static void Settle(Batch *batch, size_t slot, DeliveryStatus status,
                     std::string &&error) noexcept;
  void Abandon(const char *reason) noexcept;
  void GiveUp(Batch *batch) noexcept;
  static void FailAll(size_t n, Delivery *out, const char *reason) noexcept;

  const std::thread::id owner_;
  rd_kafka_t *rk_ = nullptr;
  // Topic handles by name; destroyed before the producer.
  std::map<std::string, rd_kafka_topic_t *, std::less<>> topics_;
  std::vector<Header> header_list_;  // reused for each message's headers
  std::string header_scratch_;       // backs header values the format builds
  std::string value_scratch_;        // backs the value when the format rewrites the payload
  KafkaWaitLimits limits_;           // see kafka_sink.hpp
  int wait_limit_ms_ = 10000 + KafkaWaitLimits{}.margin_ms;

  LogBuffer logs_{"librdkafka log line(s)"};
  // Lines librdkafka logged from one of its own threads (never expected with
  // log.queue=true): counted, never touched there.
  std::atomic<size_t> foreign_logs_{0};
  Connection connection_ = Connection::kConnecting;
  bool fatal_ = false;

  // Open batches, oldest first; empty between Collect and the next Send.
  std::deque<Batch> open_;
  uint64_t generation_ = 0;             // the last batch's ticket
  const char *purge_reason_ = nullptr;  // while purging: what purged reports say
  // A batch was given up (GiveUp) while librdkafka still held some of its
  // messages: purged at the next Send that finds no batch open.
  bool leftovers_ = false;
};

KafkaSink::~KafkaSink() {
  open_.clear();  // reports from now on find no batch
  if (rk_ == nullptr) return;
  // Nothing should be left between Publish calls; if anything is, it fails
  // now rather than keeping rd_kafka_destroy waiting for unreachable brokers.
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_flush(rk_, kDestroyFlushMs);
  for (auto &topic : topics_) rd_kafka_topic_destroy(topic.second);
  topics_.clear();
  rd_kafka_destroy(rk_);
}

bool KafkaSink::Init(const std::string &name, const SinkOptions &options, KafkaWaitLimits limits,
                     std::string *error) {
  limits_ = limits;
  struct ConfDeleter {
    void operator()(rd_kafka_conf_t *conf) const { rd_kafka_conf_destroy(conf); }
  };
  std::unique_ptr<rd_kafka_conf_t, ConfDeleter> conf(rd_kafka_conf_new());
  char errstr[512];
  auto set = [&](const std::string &key, const std::string &value) {
    errstr[0] = '\0';
    if (rd_kafka_conf_set(conf.get(), key.c_str(), value.c_str(), errstr, sizeof errstr) ==
        RD_KAFKA_CONF_OK) {
      return true;
    }
    *error = "option \"" + key + "\": " + Trimmed(errstr);
    return false;
  };
  if (!set("client.id", "outbox-" + name)) return false;
  for (const auto &property : kDefaults) {
    if (!set(property[0], property[1])) return false;
  }
  for (const SinkOption &option : options) {
    if (!set(option.key, option.text)) return false;
  }
  // Not the user's choice: without it log lines would be delivered on
  // librdkafka's threads.
  if (!set("log.queue", "true")) return false;
  rd_kafka_conf_set_opaque(conf.get(), this);
  rd_kafka_conf_set_log_cb(conf.get(), &KafkaSink::OnLog);
  rd_kafka_conf_set_error_cb(conf.get(), &KafkaSink::OnError);
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaSink::OnDelivery);
  const int timeout_ms = MessageTimeoutMs(conf.get());
  wait_limit_ms_ = (timeout_ms == 0 ? limits_.unlimited_ms : timeout_ms) + limits_.margin_ms;

  errstr[0] = '\0';
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (rk_ == nullptr) {
    *error = Trimmed(errstr);
    if (error->empty()) *error = "librdkafka could not create a producer";
    return false;
  }
  static_cast<void>(conf.release());  // rd_kafka_new took it
  const rd_kafka_resp_err_t err = rd_kafka_set_log_queue(rk_, nullptr);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    *error = "cannot route librdkafka's log to the main queue: " + KafkaErrorText(err);
    return false;  // the destructor destroys rk_
  }
  return true;
}

void KafkaSink::OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf) noexcept {
  if (rk == nullptr) return;
  auto *self = static_cast<KafkaSink *>(rd_kafka_opaque(rk));
  if (self == nullptr) return;
  if (std::this_thread::get_id() != self->owner_) {
    self->foreign_logs_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  try {
    std::string text(fac != nullptr ? fac : "");
    text += ": ";
    text += buf != nullptr ? buf : "";
    self->AddLog(FromSyslog(level), std::move(text));
  } catch (...) {
    self->logs_.CountDropped(1);
  }
}

void KafkaSink::OnError(rd_kafka_t *rk, int err, const char *reason, void *opaque) noexcept {
  auto *self = static_cast<KafkaSink *>(opaque);
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  try {
    if (code == RD_KAFKA_RESP_ERR__FATAL) {
      self->fatal_ = true;
      char detail[512];
      detail[0] = '\0';
      const rd_kafka_resp_err_t cause = rd_kafka_fatal_error(rk, detail, sizeof detail);
      self->AddLog(LogLevel::kError, "fatal error, the producer must be recreated: " +
                                         KafkaErrorText(cause) + ": " + detail);
      return;
    }
    if (code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) self->connection_ = Connection::kDown;
    std::string text(rd_kafka_err2name(code));
    text += ": ";
    text += reason != nullptr ? reason : rd_kafka_err2str(code);
    // librdkafka has already logged a connection failure as a FAIL line.
    const bool logged = code == RD_KAFKA_RESP_ERR__TRANSPORT || code == RD_KAFKA_RESP_ERR__RESOLVE;
    self->AddLog(logged ? LogLevel::kDebug : LogLevel::kWarning, std::move(text));
  } catch (...) {
    self->logs_.CountDropped(1);
  }
}

void KafkaSink::OnDelivery(rd_kafka_t *, const rd_kafka_message_t *message, void *opaque) noexcept {
  static_cast<KafkaSink *>(opaque)->Record(message);
}

void KafkaSink::AddLog(LogLevel level, std::string text) noexcept {
  logs_.Add(level, std::move(text));
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
        batch->timed_out.emplace_back(slot, message->rkt);
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

void KafkaSink::Publish(const OutMessage *messages, size_t n, Delivery *out,
                        InterruptCheck interrupted) {
  Collect(Send(messages, n, out, interrupted), interrupted);
}

uint64_t KafkaSink::Send(const OutMessage *messages, size_t n, Delivery *out,
                         InterruptCheck interrupted) {
  if (n == 0) return 0;
  if (n > kMaxChunk) {  // more than a slot can number (32-bit pointers only)
    FailAll(n, out, "batch too large");
    return 0;
  }
  if (leftovers_ && open_.empty()) {
    // Messages of batches given up at their deadline (GiveUp) that
    // librdkafka still holds: with no batch open, purging them hurts none,
    // and they must not pile up (with message.timeout.ms=0 they would stay,
    // one more copy per retry). Their reports find no batch.
    rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    leftovers_ = false;
  }
  try {
    open_.emplace_back();
  } catch (...) {
    FailAll(n, out, "out of memory");
    return 0;
  }
  Batch *batch = &open_.back();
  batch->out = out;
  batch->ticket = ++generation_;
  const uint64_t ticket = batch->ticket;
  try {
    SendBatch(batch, messages, n, interrupted);
  } catch (const std::bad_alloc &) {
    Abandon("out of memory");
    FailAll(n, out, "out of memory");
  } catch (...) {
    Abandon("unexpected error");  // only `interrupted` could throw anything else
    FailAll(n, out, "unexpected error");
  }
  return ticket;
}

void KafkaSink::SendBatch(Batch *batch, const OutMessage *messages, size_t n,
                          InterruptCheck interrupted) {
  batch->settled.assign(n, 0);
  batch->generation = static_cast<uintptr_t>(batch->ticket) & kSlotMask;
  batch->deadline = Clock::now() + Millis(wait_limit_ms_);
  const uintptr_t generation_bits = batch->generation << kSlotBits;
  purge_reason_ = nullptr;
  const char *stop = nullptr;  // why we stopped producing, if we did
  if (NeedsRecreate()) stop = "fatal error: the producer must be recreated";
  // (target, key) pairs with a message refused on the spot in this batch:
  // later messages of the pair are not sent, so none overtakes it.
  std::set<std::pair<std::string_view, std::string_view>> refused;
  for (size_t i = 0; i < n; ++i) {
    const OutMessage &message = messages[i];
    if (stop != nullptr) {
      Settle(batch, i, DeliveryStatus::kRetriable, stop);
      continue;
    }
    if (message.has_key && refused.count({message.target, message.key}) != 0) {
      Settle(batch, i, DeliveryStatus::kNotSent,
             "not sent: an earlier event with the same key failed in this batch");
      continue;
    }
    rd_kafka_resp_err_t err = Produce(message, generation_bits | i);
    while (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      // Let librdkafka send what it holds (flush ignores linger), then retry.
      if (interrupted != nullptr && interrupted()) {
        stop = "interrupted";
      } else if (Clock::now() >= batch->deadline) {
        stop = "timed out";
      } else {
        rd_kafka_flush(rk_, kQueueFullWaitMs);
        err = Produce(message, generation_bits | i);
        continue;
      }
      break;
    }
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ++batch->unsettled;
    } else if (stop != nullptr) {
      Settle(batch, i, DeliveryStatus::kRetriable, stop);
    } else {
      std::string text = KafkaErrorText(err);
      const DeliveryStatus status = StatusOf(err);
      if (err == RD_KAFKA_RESP_ERR__INVALID_ARG && !IsValidKafkaTopic(message.target)) {
        text += ": not a valid Kafka topic name: \"";
        text += message.target;
        text += '"';
      } else if (status == DeliveryStatus::kTargetRefused) {
        text += " (topic \"";
        text += message.target;
        text += "\")";
      }
      Settle(batch, i, status, std::move(text));
      if (message.has_key) refused.emplace(message.target, message.key);
    }
  }
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
// before it gives up on a topic's metadata), or for brokers that are down.
// Only the brokers can tell: ask them about each such topic. A broker that
// answers "unknown topic" or "not authorised" makes those messages
// kTargetRefused (an attempt each; the sink is not down); no answer leaves
// them retriable (an outage). Never throws.
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
      for (const auto &[slot, topic] : batch->timed_out) {
        const char *name = rd_kafka_topic_name(topic);
        for (int t = 0; t < md->topic_cnt; ++t) {
          const rd_kafka_metadata_topic &m = md->topics[t];
          if (m.topic == nullptr || strcmp(m.topic, name) != 0) continue;
          if (ClassifyKafkaError(m.err) != DeliveryStatus::kTargetRefused) break;
          std::string text = KafkaErrorText(m.err);
          text += " (topic \"";
          text += name;
          text += "\")";
          Settle(batch, slot, DeliveryStatus::kTargetRefused, text.c_str());
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

rd_kafka_resp_err_t KafkaSink::Produce(const OutMessage &message, uintptr_t tag) {
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  rd_kafka_topic_t *topic = Topic(message.target, &err);
  if (topic == nullptr) return err;

  KafkaHeaders(message, &header_scratch_, &header_list_);  // the route's format decides them
  rd_kafka_headers_t *headers = rd_kafka_headers_new(header_list_.size());
  for (const Header &header : header_list_) {
    rd_kafka_header_add(headers, NonNull(header.name), static_cast<ssize_t>(header.name.size()),
                        NonNull(header.value), static_cast<ssize_t>(header.value.size()));
  }

  rd_kafka_vu_t vu[6]{};
  size_t count = 0;
  vu[count].vtype = RD_KAFKA_VTYPE_RKT;
  vu[count++].u.rkt = topic;
  if (message.has_key) {  // an empty key is a zero-length key, not a null one
    vu[count].vtype = RD_KAFKA_VTYPE_KEY;
    vu[count].u.mem.ptr = const_cast<char *>(NonNull(message.key));
    vu[count++].u.mem.size = message.key.size();
  }
  const std::string_view value = KafkaValue(message, &value_scratch_);
  vu[count].vtype = RD_KAFKA_VTYPE_VALUE;
  vu[count].u.mem.ptr = const_cast<char *>(NonNull(value));
  vu[count++].u.mem.size = value.size();
  vu[count].vtype = RD_KAFKA_VTYPE_MSGFLAGS;  // copy: nothing points into the caller's memory
  vu[count++].u.i = RD_KAFKA_MSG_F_COPY;
  vu[count].vtype = RD_KAFKA_VTYPE_OPAQUE;
  vu[count++].u.ptr = reinterpret_cast<void *>(tag);
  vu[count].vtype = RD_KAFKA_VTYPE_HEADERS;
  vu[count++].u.headers = headers;

  rd_kafka_error_t *error = rd_kafka_produceva(rk_, vu, count);
  if (error == nullptr) return RD_KAFKA_RESP_ERR_NO_ERROR;  // librdkafka owns the headers
  err = rd_kafka_error_code(error);
  rd_kafka_error_destroy(error);
  rd_kafka_headers_destroy(headers);  // still ours when producing failed
  return err;
}

rd_kafka_topic_t *KafkaSink::Topic(std::string_view target, rd_kafka_resp_err_t *err) {
  const auto found = topics_.find(target);
  if (found != topics_.end()) return found->second;
  if (!IsValidKafkaTopic(target)) {
    *err = RD_KAFKA_RESP_ERR__INVALID_ARG;
    return nullptr;
  }
  std::string name(target);
  rd_kafka_topic_t *topic = rd_kafka_topic_new(rk_, name.c_str(), nullptr);
  if (topic == nullptr) {
    *err = rd_kafka_last_error();
    if (*err == RD_KAFKA_RESP_ERR_NO_ERROR) *err = RD_KAFKA_RESP_ERR__INVALID_ARG;
    return nullptr;
  }
  try {
    topics_.emplace(std::move(name), topic);
  } catch (...) {
    rd_kafka_topic_destroy(topic);
    throw;
  }
  return topic;
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

void KafkaSink::FailAll(size_t n, Delivery *out, const char *reason) noexcept {
  for (size_t i = 0; i < n; ++i) {
    out[i].status = DeliveryStatus::kRetriable;
    try {
      out[i].error = reason;
    } catch (...) {
      out[i].error.clear();
    }
  }
}

void KafkaSink::Poll() { rd_kafka_poll(rk_, 0); }

std::vector<LogLine> KafkaSink::TakeLogs() {
  logs_.CountDropped(foreign_logs_.exchange(0, std::memory_order_relaxed));
  return logs_.Take();
}

bool KafkaSink::NeedsRecreate() const {
  // The error event may still wait in the queue; the handle knows at once.
  char unused[1];
  return fatal_ || rd_kafka_fatal_error(rk_, unused, sizeof unused) != RD_KAFKA_RESP_ERR_NO_ERROR;
}

// "failed": a fatal error, recreate the sink. Otherwise the latest evidence:
// "connected" after a message was acknowledged, "down" after librdkafka
// reported all brokers down, "connecting" before either. An idle sink keeps
// its last word: brokers that come back show as "connected" only once a
// message is delivered.
std::string KafkaSink::State() const {
  if (NeedsRecreate()) return "failed";
  switch (connection_) {
    case Connection::kConnected:
      return "connected";
    case Connection::kDown:
      return "down";
    case Connection::kConnecting:
      break;
  }
  return "connecting";
}

}  // namespace

DeliveryStatus ClassifyKafkaError(int err) {
  switch (static_cast<rd_kafka_resp_err_t>(err)) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return DeliveryStatus::kDelivered;
    // The message itself (or the produce request that carried it, which
    // Kafka accepts or refuses as a whole) will never be accepted as is.
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:  // invalid topic name
    case RD_KAFKA_RESP_ERR__INVALID_ARG:     // ours: invalid topic name
    case RD_KAFKA_RESP_ERR_INVALID_MSG:      // CORRUPT_MESSAGE
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
      return DeliveryStatus::kRejected;
    // The broker answered that the topic cannot take messages: each event
    // counts an attempt (it may be created or granted before they run out:
    // outbox.max_attempts with backoff gives minutes), and the sink is not
    // down for it (its other topics flow).
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
      return DeliveryStatus::kTargetRefused;
    // Everything else may pass later: brokers down, timeouts, leader changes,
    // not enough replicas, purged, a fatal producer error (the next producer
    // retries).
    default:
      return DeliveryStatus::kRetriable;
  }
}

std::string KafkaErrorText(int err) {
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  std::string text(rd_kafka_err2name(code));
  text += ": ";
  text += rd_kafka_err2str(code);
  return text;
}

std::unique_ptr<Sink> MakeKafkaSink(const std::string &name, const SinkOptions &options,
                                    std::string *error, bool privileged) {
  return MakeKafkaSinkWithLimits(name, options, error, privileged, KafkaWaitLimits{});
}

std::unique_ptr<Sink> MakeKafkaSinkWithLimits(const std::string &name, const SinkOptions &options,
                                              std::string *error, bool privileged,
                                              KafkaWaitLimits limits) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  try {
    // The same checks create_sink() made, so both agree on what is valid.
    if (std::optional<std::string> invalid = ValidateKafkaOptions(options, privileged)) {
      *error = std::move(*invalid);
      return nullptr;
    }
    auto sink = std::make_unique<KafkaSink>();
    if (!sink->Init(name, options, limits, error)) return nullptr;
    return sink;
  } catch (...) {
    DescribeCurrentException(error);
  }
  return nullptr;
}

}  // namespace outbox
