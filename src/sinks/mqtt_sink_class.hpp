// The MQTT sink's class: one libmosquitto client, used only from the
// owner's thread. Private to the MQTT sink's files: mqtt_sink.cpp sends
// each message, mqtt_delivery.cpp settles them as acknowledgements come (or
// do not), mqtt_connection.cpp connects, drives the client's socket and
// receives libmosquitto's callbacks. Pipelined (keyed_sink.hpp): several
// Sends may be open at once on the one connection. Everything else sees
// only mqtt_sink.hpp.
//
// Threads: none. libmosquitto's threaded loop is never started: the sink
// polls the client's socket itself and calls mosquitto_loop_read, _write
// and _misc, so libmosquitto's callbacks (connected, disconnected, message
// acknowledged) run only inside those calls, on the owner's thread.
//
// Every wait is at most kWaitSliceMs, so `interrupted` is checked about every
// 100 ms; no message waits longer than ack_timeout_ms for its answer, and
// connecting (TCP, TLS, CONNACK) at most connect_timeout_ms (name resolution
// is the resolver's, as for the other sinks). Connecting is the one wait a
// Send makes; acknowledgements are waited for by CollectFor and Collect.
#pragma once

#include "sinks/mqtt_library.hpp"

#include <cstdint>
#include <string>
#include <string_view>

#include "core/sink.hpp"
#include "sinks/keyed_sends.hpp"
#include "sinks/keyed_sink.hpp"
#include "sinks/mqtt_message.hpp"
#include "sinks/mqtt_options.hpp"

namespace outbox {

class MqttSink final : public KeyedSink {
 public:
  MqttSink(const std::string &name, MqttOptions options);
  ~MqttSink() override;
  MqttSink(const MqttSink &) = delete;
  MqttSink &operator=(const MqttSink &) = delete;

  bool NeedsRecreate() const override { return false; }  // it reconnects by itself
  std::string State() const override;

  // libmosquitto's callbacks (mqtt_connection.cpp), on the owner's thread
  // inside a loop call. Never throw.
  void OnConnect(int reason_code) noexcept;
  void OnDisconnect(int rc) noexcept;
  void OnPublish(int mid, int reason_code) noexcept;

 private:
  // KeyedSink's part (mqtt_delivery.cpp).
  bool Connect(InterruptCheck interrupted, std::string *error) override;
  void Step(int64_t wait_ms) override;
  void Forgotten() noexcept override;
  std::string UpText() const override;

  // mqtt_sink.cpp: each message as sent.
  static std::string ShownTopic(std::string_view topic);
  void SendReady();
  bool SendMessage(SendRef ref);

  // mqtt_delivery.cpp
  void StepConnecting(int64_t wait_ms);
  void LoseConnection(const std::string &reason);

  // mqtt_connection.cpp
  bool StartClient(std::string *error);
  void ForgetCaFile() noexcept;
  bool SetUpTls(std::string *error);
  void Disconnect() noexcept override;
  // Waits up to wait_ms for the socket, then lets libmosquitto read, write
  // and keep the connection alive. False when the connection is gone.
  bool Drive(int64_t wait_ms);
  int Publish5(const std::string &topic, const MqttMessage &msg, std::string_view id, int *mid);
  std::string Where() const;

  const std::string name_;
  const MqttOptions options_;
  const std::string client_id_;  // the prefix and this instance's random suffix

  mosquitto *mosq_ = nullptr;
  bool connected_ = false;              // CONNACK accepted, and not lost since
  bool lost_ = false;                   // the connection went (a callback said so)
  int connack_code_ = -1;               // the last CONNACK's reason code, -1 before one
  std::string lost_reason_;             // why, as libmosquitto said
  std::string ca_file_;                 // tls_ca written out for libmosquitto, while connected
  Clock::time_point connect_deadline_;  // while connecting: connect_timeout_ms from the start
  bool ever_connected_ = false;
  bool callback_failed_ = false;  // a callback ran out of memory: start afresh
  bool unsure_ = false;           // the broker confused packet identifiers (0x91): start afresh

  // Reused buffers.
  MqttMessage message_;
  std::string body_scratch_;
  std::string topic_;
};

}  // namespace outbox
