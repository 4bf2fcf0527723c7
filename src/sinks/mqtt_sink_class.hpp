// The MQTT sink's class: options_.connections libmosquitto clients used
// as one connection, only from the owner's thread. Private to the MQTT
// sink's files: mqtt_sink.cpp sends each message, mqtt_delivery.cpp settles
// them as acknowledgements come (or do not), mqtt_connection.cpp connects,
// drives the clients' sockets and receives libmosquitto's callbacks.
// Pipelined (keyed_sink.hpp): several Sends may be open at once. Everything
// else sees only mqtt_sink.hpp.
//
// Several connections, one state: a broker lets a connection have only its
// Receive Maximum of messages unacknowledged (mosquitto: 20), so the sink
// spreads its messages over several. They are made together and the sink
// is connected once every one is; once it is, the loss of any ends them
// all (what is in flight on each is retried), so the sink has one state as
// with one connection. A broker that takes fewer (a per-user or listener
// limit) leaves the sink with the ones it took (SettleForFewer); after a
// loss all are asked for again. With retain, one connection: a broker
// keeps the last message it got per topic, and only one client's messages
// reach it in the order they were sent.
// Every message of a key goes over the same connection (LinkFor): a broker
// orders only what one client sent, and a clustered broker behind a load
// balancer may deliver two clients' messages in either order even when
// the first was acknowledged before the second was sent. An acknowledgement
// is found by its connection and packet identifier (WireId): each
// connection numbers its messages alone.
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
#include <vector>

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

  // One of the connections: its client and what its callbacks said.
  struct Link {
    MqttSink *sink = nullptr;
    int index = 0;
    mosquitto *mosq = nullptr;
    std::string client_id;
    bool connected = false;  // CONNACK accepted, and not lost since
    bool failed = false;     // lost or refused before the sink was connected
  };

  // libmosquitto's callbacks (mqtt_connection.cpp), on the owner's thread
  // inside a loop call. Never throw.
  void OnConnect(Link &link, int reason_code) noexcept;
  void OnDisconnect(Link &link, int rc) noexcept;
  void OnPublish(const Link &link, int mid, int reason_code) noexcept;
  // What OnConnect's refusal and OnDisconnect share (mqtt_connection.cpp).
  bool NoteLinkFailed(Link *link) noexcept;

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
  void LoseConnection(const std::string &reason, KeyedSends::Loss loss);

  // mqtt_connection.cpp
  bool StartClients(std::string *error);
  bool StartClient(Link *link, std::string *error);
  void ForgetCaFile() noexcept;
  bool SetUpTls(mosquitto *mosq, std::string *error);
  void Disconnect() noexcept override;
  // Waits up to wait_ms for the sockets, then lets libmosquitto read, write
  // and keep each connection alive. False when a connection is gone.
  bool Drive(int64_t wait_ms);
  bool DriveTlsHandshakes(int64_t wait_ms);
  int Publish5(mosquitto *mosq, const std::string &topic, const MqttMessage &msg,
               std::string_view id, int *mid);
  std::string Where() const;
  std::string ClientIdOf(int index) const;
  // How many connections to make: options_.connections, but one with
  // retain (below).
  int AskedConnections() const;
  // The connection message `m` goes over: its key's, or the next in turn.
  size_t LinkFor(const OutMessage &m);
  // While connecting: gives up on the connections the broker did not take,
  // going on with those it took; false when it took none.
  bool SettleForFewer(const std::string &why);
  // The id KeyedSends knows a message in flight by: its connection's index
  // and the packet identifier (1 to 65535) that connection gave it.
  static uint64_t WireId(int link_index, int mid) {
    return (static_cast<uint64_t>(link_index) << 16) | static_cast<uint16_t>(mid);
  }

  const std::string name_;
  const MqttOptions options_;
  const uint64_t nonce_;  // this instance's random number (ClientIdOf)

  // options_.connections of them while connecting or connected, none
  // otherwise; never resized while not empty (callbacks hold their address).
  std::vector<Link> links_;
  size_t next_link_ = 0;                // the connection the next keyless message goes on
  bool connected_ = false;              // every connection accepted, and none lost since
  bool established_ = false;            // connected_ was true since the connections were made
  bool lost_ = false;                   // a connection went after established_ (a callback said so)
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
