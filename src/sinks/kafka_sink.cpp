// The Kafka sink: building its producer (kafka_config.*), the callbacks that
// librdkafka runs on the owner's thread, and producing each batch. The class,
// and why no librdkafka thread ever runs our code, is in kafka_sink_class.hpp;
// delivery reports and waiting for them in kafka_delivery.cpp.
#include "sinks/kafka_sink.hpp"
#include "sinks/kafka_sink_class.hpp"
#include "sinks/kafka_config.hpp"
#include "sinks/kafka_errors.hpp"
#include "sinks/sink_options.hpp"

#include "core/names.hpp"

#include <librdkafka/rdkafka.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
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

// Wait while librdkafka's queue is full before producing again.
constexpr int kQueueFullWaitMs = 10;
// Destructor: how long librdkafka may take to account for purged messages.
constexpr int kDestroyFlushMs = 1000;

// librdkafka takes a null pointer for "no value" (a null key, a tombstone, a
// null header): an empty view passes NonNull's (core/sink.hpp).

// syslog levels, as librdkafka logs them.
LogLevel FromSyslog(int level) {
  if (level <= 3) return LogLevel::kError;  // emerg, alert, crit, err
  if (level == 4) return LogLevel::kWarning;
  if (level <= 6) return LogLevel::kInfo;  // notice, info
  return LogLevel::kDebug;
}

}  // namespace

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

bool KafkaSink::Init(const std::string &name, const SinkOptions &options, KafkaLimits limits,
                     std::string *error) {
  limits_ = limits;
  KafkaConfPtr conf = NewKafkaConf(name, options, error);
  if (conf == nullptr) return false;
  rd_kafka_conf_set_opaque(conf.get(), this);
  rd_kafka_conf_set_log_cb(conf.get(), &KafkaSink::OnLog);
  rd_kafka_conf_set_error_cb(conf.get(), &KafkaSink::OnError);
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaSink::OnDelivery);
  const int timeout_ms = KafkaMessageTimeoutMs(conf.get());
  wait_limit_ms_ = (timeout_ms == 0 ? limits_.unlimited_ms : timeout_ms) + limits_.margin_ms;

  char errstr[512];
  errstr[0] = '\0';
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (rk_ == nullptr) {
    *error = TrimmedKafkaText(errstr);
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

void KafkaSink::AddLog(LogLevel level, std::string text) noexcept {
  logs_.Add(level, std::move(text));
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
  // Routes and keys with a message refused on the spot in this batch: their
  // later messages are not sent (to any topic), so none overtakes it.
  std::set<ChainKey> refused;
  for (size_t i = 0; i < n; ++i) {
    const OutMessage &message = messages[i];
    if (stop != nullptr) {
      Settle(batch, i, DeliveryStatus::kRetriable, stop);
      continue;
    }
    if (message.has_key && refused.count(ChainOf(message)) != 0) {
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
      if (message.has_key) refused.emplace(ChainOf(message));
    }
  }
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

std::unique_ptr<Sink> MakeKafkaSink(const std::string &name, const SinkOptions &options,
                                    std::string *error, bool privileged) {
  return MakeKafkaSinkWithLimits(name, options, error, privileged, KafkaLimits{});
}

std::unique_ptr<Sink> MakeKafkaSinkWithLimits(const std::string &name, const SinkOptions &options,
                                              std::string *error, bool privileged,
                                              KafkaLimits limits) {
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
