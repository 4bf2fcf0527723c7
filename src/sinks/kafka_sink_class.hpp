// The Kafka sink's class: one librdkafka producer, driven only from the
// owner's thread. Private to the Kafka sink's files: kafka_sink.cpp builds
// the producer and produces, kafka_delivery.cpp records delivery reports and
// waits for them. Everything else sees only kafka_sink.hpp.
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
#pragma once

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/log_buffer.hpp"
#include "core/sink.hpp"
#include "sinks/kafka_sink.hpp"

namespace outbox {

class KafkaSink final : public Sink {
 public:
  KafkaSink() : owner_(std::this_thread::get_id()) {}
  ~KafkaSink() override;
  KafkaSink(const KafkaSink &) = delete;
  KafkaSink &operator=(const KafkaSink &) = delete;

  // Builds the producer; false with *error set when librdkafka refuses.
  bool Init(const std::string &name, const SinkOptions &options, KafkaLimits limits,
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
  // It wrote to limits_.max_topics distinct topics (see KafkaLimits).
  bool Worn() const override { return topics_.size() >= limits_.max_topics; }
  std::string State() const override;

 private:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  // A delivery report's opaque: the batch generation in the high half of a
  // pointer, the slot in the low half. A report whose generation is not an
  // open batch's belongs to a batch already given up on.
  static constexpr unsigned kSlotBits = sizeof(uintptr_t) * 4;
  static constexpr uintptr_t kSlotMask = (uintptr_t{1} << kSlotBits) - 1;
  static constexpr size_t kMaxChunk = kSlotMask;

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
    // Slots whose report said _MSG_TIMED_OUT, with their topic and
    // partition (see ExplainTimeouts).
    struct TimedOut {
      size_t slot;
      rd_kafka_topic_t *topic;
      int32_t partition;  // RD_KAFKA_PARTITION_UA when none was chosen yet
    };
    std::vector<TimedOut> timed_out;
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
  KafkaLimits limits_;               // see kafka_sink.hpp
  int wait_limit_ms_ = 10000 + KafkaLimits{}.margin_ms;

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

}  // namespace outbox
