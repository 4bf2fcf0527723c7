// What the AMQP sink sends per message: the body and headers of its format
// (core/message_format.hpp: raw, or CloudEvents in structured mode), its
// properties, the user headers RabbitMQ would act on left out, and the
// checks that keep a message librabbitmq cannot frame from ever being
// started on the wire. docs/formats.md shows the result byte for byte.
#include "sinks/amqp_sink.hpp"
#include "sinks/amqp_sink_class.hpp"

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace outbox {

namespace {

// AMQP 0-9-1 frame layout: type, channel and size before the payload, the
// end marker after it; a content header also holds class, weight and body
// size before the properties.
constexpr size_t kFrameOverhead = 8;
constexpr size_t kContentHeaderFixed = 12;
// What basic.publish's method frame holds besides the exchange name and the
// routing key, with room to spare.
constexpr size_t kPublishMethodFixed = 32;

// timestamptz counts microseconds from 2000-01-01; AMQP's timestamp property
// counts seconds from 1970-01-01.
constexpr int64_t kUnixSecondsAt2000 = 946684800;
constexpr int64_t kMicrosPerSecond = 1000000;

amqp_bytes_t Bytes(std::string_view text) {
  return amqp_bytes_t{text.size(), const_cast<char *>(NonNull(text))};
}

bool FoldsToAscii(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c =
        name[i] >= 'A' && name[i] <= 'Z' ? static_cast<char>(name[i] - 'A' + 'a') : name[i];
    if (c != lower[i]) return false;
  }
  return true;
}

}  // namespace

bool AmqpDropsHeader(std::string_view name) {
  // CC and BCC: RabbitMQ routes a copy to every queue they name
  // (sender-selected distribution); with a plain string value, as every
  // user header has, it closes the channel instead. Left out in any case.
  if (FoldsToAscii(name, "cc") || FoldsToAscii(name, "bcc")) return true;
  // "x-": the prefix RabbitMQ and its plugins read as instructions
  // (x-death and x-first-death-* for dead lettering, x-delay,
  // x-deduplication-header, x-received-from for federation and shovels'
  // loop detection, x-stream-filter-value, ...). RabbitMQ matches it in
  // lower case only, so "X-Tenant" is kept.
  return name.size() >= 2 && name[0] == 'x' && name[1] == '-';
}

int64_t AmqpTimestamp(int64_t pg_timestamp_us) {
  // Floor division: a time before 2000 still rounds down.
  int64_t seconds = pg_timestamp_us / kMicrosPerSecond;
  if (pg_timestamp_us % kMicrosPerSecond < 0) --seconds;
  return seconds + kUnixSecondsAt2000;
}

std::optional<std::string> AmqpSink::LayOut(const OutMessage &m, Layout *l,
                                            DeliveryStatus *refusal) const {
  if (!HeaderedFormat(m.format)) {
    *refusal = DeliveryStatus::kRejected;
    return "format " + std::string(MessageFormatName(m.format)) +
           " cannot be sent to an AMQP sink (routes to it take raw or cloudevents)";
  }
  if (m.target.size() > kAmqpMaxShortString) {
    *refusal = DeliveryStatus::kTargetRefused;
    return "routing key of " + std::to_string(m.target.size()) +
           " bytes: AMQP allows at most 255 bytes";
  }
  const bool cloudevents = m.format == MessageFormat::kCloudEvents;
  const std::string_view body = HeaderedBody(m, CloudEventsMode::kStructured, &l->scratch_body);
  if (max_body_ && body.size() > *max_body_) {
    *refusal = DeliveryStatus::kRejected;
    return "message size " + std::to_string(body.size()) + " is larger than the broker's max " +
           std::to_string(*max_body_) + " (as it said when it refused a larger one)";
  }
  HeaderedHeaders(m, CloudEventsMode::kStructured, &l->scratch_headers, &l->headers);
  l->entries.clear();
  for (const Header &h : l->headers) {
    if (AmqpDropsHeader(h.name)) continue;
    if (h.name.size() > kAmqpMaxShortString) {
      *refusal = DeliveryStatus::kRejected;
      return "a header name of " + std::to_string(h.name.size()) +
             " bytes: AMQP allows at most 255 bytes";
    }
    amqp_table_entry_t e{};
    e.key = Bytes(h.name);
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = Bytes(h.value);
    l->entries.push_back(e);
  }

  amqp_basic_properties_t &p = l->properties;
  p = amqp_basic_properties_t{};
  p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
             AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG;
  p.content_type =
      amqp_cstring_bytes(cloudevents ? "application/cloudevents+json" : "application/json");
  p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  p.message_id = Bytes(m.id);
  p.timestamp = static_cast<uint64_t>(AmqpTimestamp(m.created_at));
  p.app_id = amqp_cstring_bytes("outbox");
  // Topics are at most 249 bytes (names.hpp); one restored from elsewhere
  // still travels in outbox-topic, or in the CloudEvent's type.
  if (m.topic.size() <= kAmqpMaxShortString) {
    p._flags |= AMQP_BASIC_TYPE_FLAG;
    p.type = Bytes(m.topic);
  }
  if (!l->entries.empty()) {
    p._flags |= AMQP_BASIC_HEADERS_FLAG;
    p.headers = amqp_table_t{static_cast<int>(l->entries.size()), l->entries.data()};
  }
  l->body = Bytes(body);

  // The content header must fit one frame: librabbitmq would find out only
  // after basic.publish's method frame went out, leaving the connection
  // expecting a header that never comes. Emit bounds the headers (16 kB of
  // JSON), but a broker may tune frames down to 4 kB.
  l->encoded.resize(static_cast<size_t>(frame_max_));
  const size_t room = static_cast<size_t>(frame_max_) - kFrameOverhead - kContentHeaderFixed;
  const int encoded =
      amqp_encode_properties(AMQP_BASIC_CLASS, &p, amqp_bytes_t{room, l->encoded.data()});
  if (encoded < 0) {
    *refusal = DeliveryStatus::kRejected;
    return "its headers do not fit in one AMQP frame of " + std::to_string(frame_max_) +
           " bytes (the broker's frame_max)";
  }
  l->properties_size = static_cast<size_t>(encoded);
  return std::nullopt;
}

size_t AmqpSink::WireSize(const Layout &l, std::string_view routing_key) const {
  const size_t per_body_frame = static_cast<size_t>(frame_max_) - kFrameOverhead;
  const size_t body_frames = (l.body.len + per_body_frame - 1) / per_body_frame;
  return kFrameOverhead + kPublishMethodFixed + options_.exchange.size() + routing_key.size() +
         kFrameOverhead + kContentHeaderFixed + l.properties_size + l.body.len +
         body_frames * kFrameOverhead;
}

// Whether the socket takes `bytes` more without librabbitmq's write having
// to wait for the broker to read: what is queued (unsent or unacknowledged
// by the peer's TCP) plus the message within half the send buffer (the
// kernel counts its own overhead against the buffer too). An empty queue
// always has room: a message larger than the buffer goes once the broker
// has read everything before it.
bool AmqpSink::RoomFor(size_t bytes) const {
  const int fd = amqp_get_sockfd(conn_);
  int queued = 0;
  int buffer = 0;
  socklen_t size = sizeof buffer;
  if (fd < 0 || ioctl(fd, SIOCOUTQ, &queued) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, &size) != 0) {
    return true;  // nothing to go by: librabbitmq's write waits if it must
  }
  return queued <= 0 || static_cast<size_t>(queued) + bytes <= static_cast<size_t>(buffer) / 2;
}

}  // namespace outbox
