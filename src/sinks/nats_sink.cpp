// The NATS sink: a batch of messages published to JetStream over one
// libnats connection (nats_connection.cpp), each as a core NATS message with
// headers and a reply subject of its own under the sink's inbox
// (nats_commands.cpp), each answer judged as it comes (nats_delivery.cpp,
// nats_replies.*). The class is in nats_sink_class.hpp.
//
// A message is delivered only when its PubAck came: JetStream stored it, or
// had already stored a message with its Nats-Msg-Id (the event id) within
// the stream's duplicate window (duplicate: true). Re-sends that
// at-least-once delivery makes (a lost acknowledgement, a crash before the
// outcome was written) are therefore stored once when they come within that
// window: exactly once into the stream.
//
// Pipelined, per-key ordered (keyed_sink.hpp, keyed_sends.hpp): every
// message that may go is sent at once (up to kMaxInFlight over all open
// Sends), without waiting for the answers before it, except that a
// subject and key has at most one message unacknowledged: its next message
// goes when the previous one's PubAck came, and not at all when that one
// failed (kNotSent: it waits behind it). JetStream answers each message on
// its own, so one refusal never takes its neighbours with it; and since a
// key's next message is sent only after its previous one was stored, no
// refusal or loss can let a later event of a key overtake an earlier one.
// Messages without a key have no order among themselves. Send returns once
// the messages are handed to libnats; their answers are judged by
// CollectFor, Collect and Poll (nats_delivery.cpp), so a server that stops
// answering delays only its own Sends.
//
// Whatever has no answer when the connection is lost, when its
// acknowledgement timeout passes, or when its Send is interrupted or
// abandoned is kRetriable: JetStream may or may not have stored it (at
// least once; the re-send carries the same Nats-Msg-Id).
#include "sinks/nats_sink.hpp"
#include "sinks/nats_sink_class.hpp"

#include <nats/nats.h>

#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox {

namespace {

std::string ServersText(const NatsOptions &options) {
  std::string text;
  for (const NatsServer &server : options.servers) {
    if (!text.empty()) text += ", ";
    text += NatsServerUrl(server);
  }
  return text;
}

std::vector<std::string> Secrets(const NatsOptions &options) {
  std::vector<std::string> secrets;
  if (options.password) secrets.push_back(*options.password);
  if (options.token) secrets.push_back(*options.token);
  return secrets;
}

}  // namespace

// libnats's first attempt tries each server for at most connect_timeout_ms.
NatsSink::NatsSink(const std::string &name, NatsOptions options)
    : KeyedSink("NATS sink log line(s)", Secrets(options),
                options.connect_timeout_ms * static_cast<int64_t>(options.servers.size()),
                options.ack_timeout_ms),
      client_name_("outbox-" + name),
      options_(std::move(options)),
      servers_text_(ServersText(options_)) {}

NatsSink::~NatsSink() {
  Disconnect();
  if (stats_ != nullptr) natsStatistics_Destroy(stats_);
}

// "idle" before the first batch; "connected" while the connection is up
// and JetStream answers; "connecting" while libnats (re)connects and no
// batch has failed for it yet; "down" once a batch found the server
// unreachable or JetStream not answering, until a message is acknowledged.
std::string NatsSink::State() const {
  if (nc_ == nullptr) return down() ? "down" : "idle";
  switch (natsConnection_Status(nc_)) {
    case NATS_CONN_STATUS_CONNECTED:
      return down() ? "down" : "connected";
    case NATS_CONN_STATUS_CONNECTING:
    case NATS_CONN_STATUS_RECONNECTING:
      return down() ? "down" : "connecting";
    default:
      break;
  }
  return "down";
}

std::unique_ptr<Sink> MakeNatsSink(const std::string &name, const SinkOptions &options,
                                   std::string *error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  try {
    // The same checks create_sink() made, so both agree on what is valid.
    NatsOptions parsed;
    if (std::optional<std::string> invalid = ParseNatsOptions(options, &parsed)) {
      *error = std::move(*invalid);
      return nullptr;
    }
    return std::make_unique<NatsSink>(name, std::move(parsed));
  } catch (...) {
    DescribeCurrentException(error);
  }
  return nullptr;
}

}  // namespace outbox
