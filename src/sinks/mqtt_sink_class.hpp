// The MQTT sink's class: one libmosquitto client, used only from the
// owner's thread. Private to the MQTT sink's files: mqtt_sink.cpp publishes
// a batch and waits for its answers, mqtt_connection.cpp connects, drives
// the client's socket and receives libmosquitto's callbacks. Everything
// else sees only mqtt_sink.hpp.
//
// Threads: none. libmosquitto's threaded loop is never started: the sink
// polls the client's socket itself and calls mosquitto_loop_read, _write
// and _misc, so libmosquitto's callbacks (connected, disconnected, message
// acknowledged) run only inside those calls, on the owner's thread.
//
// Every wait is at most kWaitSliceMs, so `interrupted` is checked about every
// 100 ms; no message waits longer than ack_timeout_ms for its answer, and
// connecting (TCP, TLS, CONNACK) at most connect_timeout_ms (name resolution
// is the resolver's, as for the other sinks).
#pragma once

#include "sinks/mqtt_library.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/log_buffer.hpp"
#include "core/sink.hpp"
#include "sinks/mqtt_message.hpp"
#include "sinks/mqtt_options.hpp"

namespace outbox {

class MqttSink final : public Sink {
 public:
  MqttSink(const std::string &name, MqttOptions options);
  ~MqttSink() override;
  MqttSink(const MqttSink &) = delete;
  MqttSink &operator=(const MqttSink &) = delete;

  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override;
  void Poll() override;
  std::vector<LogLine> TakeLogs() override;
  bool NeedsRecreate() const override { return false; }  // it reconnects by itself
  std::string State() const override;

  // libmosquitto's callbacks (mqtt_connection.cpp), on the owner's thread
  // inside a loop call. Never throw.
  void OnConnect(int reason_code) noexcept;
  void OnDisconnect(int rc) noexcept;
  void OnPublish(int mid, int reason_code) noexcept;

 private:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  static constexpr int64_t kWaitSliceMs = 100;
  // Messages handed to libmosquitto and unacknowledged at once; the rest of
  // a batch follows as acknowledgements come. (libmosquitto itself sends
  // at most the broker's receive maximum and queues the rest.)
  static constexpr size_t kMaxInFlight = 1024;
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // One message of the current call.
  struct Slot {
    size_t next = kNone;         // the next message of its topic and key, in this call
    Clock::time_point deadline;  // once sent: when it stops waiting for an answer
    bool in_flight = false;
    bool settled = false;
  };

  // mqtt_sink.cpp: a batch from start to end.
  void PublishBatch(InterruptCheck interrupted);
  void Chain();
  bool Done() const { return settled_count_ == n_; }
  void Settle(size_t i, DeliveryStatus status, std::string error, bool answered);
  void FailRest(const std::string &reason) noexcept;
  void SendReady();
  bool SendMessage(size_t i);
  void LoseConnection(const std::string &reason);
  void Expire(Clock::time_point now);
  void NoteDown(const std::string &reason);
  void NoteUp();
  std::string Masked(std::string text) const;
  void AddLog(LogLevel level, std::string text) noexcept;

  // mqtt_connection.cpp
  bool EnsureConnection(InterruptCheck interrupted, std::string *error);
  bool AwaitConnack(Clock::time_point deadline, InterruptCheck interrupted, std::string *error);
  bool StartClient(std::string *error);
  void ForgetCaFile() noexcept;
  bool SetUpTls(std::string *error);
  void Disconnect() noexcept;
  // Waits up to wait_ms for the socket, then lets libmosquitto read, write
  // and keep the connection alive. False when the connection is gone.
  bool Drive(int64_t wait_ms);
  int Publish5(const std::string &topic, const MqttMessage &msg, std::string_view id, int *mid);
  std::string Where() const;

  const std::string name_;
  const MqttOptions options_;
  const std::string client_id_;  // the prefix and this instance's random suffix

  mosquitto *mosq_ = nullptr;
  bool connected_ = false;   // CONNACK accepted, and not lost since
  bool lost_ = false;        // the connection went (a callback said so)
  int connack_code_ = -1;    // the last CONNACK's reason code, -1 before one
  std::string lost_reason_;  // why, as libmosquitto said
  std::string ca_file_;      // tls_ca written out for libmosquitto, while connected
  bool down_ = false;        // a Publish found the broker unusable
  bool ever_connected_ = false;
  std::string last_failure_;      // while down: the reason last logged as a warning
  bool callback_failed_ = false;  // a callback ran out of memory: the call gives up
  LogBuffer logs_{"MQTT sink log line(s)"};

  // The current call (PublishBatch), cleared at its end.
  const OutMessage *messages_ = nullptr;
  Delivery *out_ = nullptr;
  size_t n_ = 0;
  size_t settled_count_ = 0;
  size_t in_flight_ = 0;
  std::vector<Slot> slots_;
  std::deque<size_t> ready_;                // messages that may be sent now, in order
  std::deque<size_t> flight_order_;         // messages sent, in order (so by deadline)
  std::unordered_map<int, size_t> by_mid_;  // the call's unacknowledged messages
  bool answered_ = false;                   // some acknowledgement came in this call
  bool unsure_ = false;  // something sent may still be answered: drop the connection

  // Reused buffers.
  MqttMessage message_;
  std::string body_scratch_;
  std::string topic_;
};

}  // namespace outbox
