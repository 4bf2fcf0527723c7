// What a message looks like at the broker, per route format
// (add_route(..., format => ...)). PostgreSQL-free: the Kafka and Redis
// sinks call these to lay out each message, and unit tests check them.
// docs/formats.md describes every shape for users; in short:
//
// raw (the contract's format, default)
//   Kafka: key = event key; value = payload; headers outbox-id, outbox-topic,
//          then the user's headers.
//   Redis: stream fields id, topic, key, payload, headers; publish/list send
//          the envelope {"id","topic","key","payload","headers"}.
// cloudevents (CloudEvents 1.0)
//   Kafka (binary content mode): key = event key; value = payload; headers
//          ce_specversion "1.0", ce_id = event id, ce_source, ce_type = topic,
//          ce_time = created_at (RFC 3339, UTC), content-type
//          "application/json", then ce_<name> per extension attribute, then
//          ce_outboxheaders.
//   Redis (structured content mode): one JSON object
//          {"specversion","id","source","type","time","datacontenttype",
//          "partitionkey" (when there is a key), <extensions>,
//          "outboxheaders", "data": payload}. Streams carry it in the field
//          "cloudevent"; publish/list send it as is.
//   On both, a user header whose name is a valid attribute name (a-z, 0-9,
//   at most 20) and not one outbox sets or reserves is an extension
//   attribute; the others are kept, as a JSON object in text, in the
//   attribute "outboxheaders".
// debezium / debezium-expanded (Debezium's outbox EventRouter, with
// table.expand.json.payload false, its default, or true)
//   Kafka: key = event key; value = the payload as a JSON string literal
//          (debezium) or the payload itself (debezium-expanded); header id =
//          event id, then the user's headers.
//   Redis: what Debezium Server's Redis sink writes with
//          message.format=extended: stream fields key (the event key,
//          "default" without one), value (as on Kafka), ID = event id, then
//          the user's headers with their names upper-cased; publish/list send
//          the same fields as one JSON object, value as JSON.
// debezium as outbox 0.1.0 sent it (kDebezium010: no route names it; a
// route of format debezium takes it while the database's extension is
// still at version 0.1.0, so a new library sends what the old one did until
// ALTER EXTENSION UPDATE turns such routes into debezium-expanded)
//   Kafka: as debezium-expanded.
//   Redis: one stream field named after the event key ("default" without
//          one) holding the payload; publish/list send the payload.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

struct OutMessage;
struct Header;

enum class MessageFormat { kRaw, kCloudEvents, kDebezium, kDebeziumExpanded, kDebezium010 };

// "raw", "cloudevents", "debezium" or "debezium-expanded"; nullopt for
// anything else (kDebezium010 has no name of its own: see above).
std::optional<MessageFormat> ParseMessageFormat(std::string_view name);
std::string_view MessageFormatName(MessageFormat format);

// The Kafka record value of `message` in its format: a view of the payload,
// or of *scratch (cleared first) when the format rewrites it. *scratch must
// outlive the view's use and not be modified meanwhile.
std::string_view KafkaValue(const OutMessage &message, std::string *scratch);

// The Kafka headers of `message` in its format, in order. Views point into
// `message`, static strings or *scratch, which must outlive their use and not
// be modified meanwhile.
void KafkaHeaders(const OutMessage &message, std::string *scratch, std::vector<Header> *out);

// The field/value arguments of a Redis XADD after the entry id ("*").
// Views point into `message`, static strings or *scratch, which must outlive
// their use and not be modified meanwhile.
void RedisStreamFields(const OutMessage &message, std::string *scratch,
                       std::vector<std::string_view> *fields);

// Appends the body that Redis modes "publish" and "list" send.
void AppendRedisBody(const OutMessage &message, std::string *out);

// Brokers whose messages are a body and named headers (AMQP, NATS JetStream):
// which route formats they take (raw and cloudevents; the Debezium formats
// are Kafka's and Redis's), the body, and the headers.
bool HeaderedFormat(MessageFormat format);

// How a CloudEvent travels: attributes as headers and the payload as the
// body (binary content mode: NATS), or one JSON object as the body
// (structured content mode, application/cloudevents+json: AMQP).
enum class CloudEventsMode { kBinary, kStructured };

// The body of `m`: the payload (raw, and cloudevents in binary mode), or the
// structured CloudEvent (as Redis carries it) built in *scratch (cleared
// first). *scratch must outlive the view and not be modified meanwhile.
std::string_view HeaderedBody(const OutMessage &m, CloudEventsMode mode, std::string *scratch);

// The headers of `m`, in order. raw: outbox-id, outbox-topic, outbox-key
// (only when the event has a key), then the user's headers but those a
// format of outbox sets (as on Kafka, and outbox-key). cloudevents, binary
// mode: ce-specversion, ce-id, ce-source, ce-type, ce-time, content-type
// (application/json), ce-partitionkey (keyed events), ce-<name> per user
// header that is an extension attribute, ce-outboxheaders (the others, as
// a JSON object in text); structured mode: none. Views point into `m`,
// static strings or *scratch (cleared first), which must outlive their use.
// A sink drops, besides, the names its own protocol gives a meaning.
void HeaderedHeaders(const OutMessage &m, CloudEventsMode mode, std::string *scratch,
                     std::vector<Header> *out);

// Appends a timestamptz (microseconds since 2000-01-01 UTC) as RFC 3339 in
// UTC with microseconds: "2026-11-21T10:00:00.123456Z". Formatted here, and
// only for the formats that show it, not for every claimed event.
void AppendRfc3339(int64_t pg_timestamp_us, std::string *out);

// Appends `text` as a JSON string literal, escaped as PostgreSQL's
// escape_json does (so envelopes read like the payloads inside them).
void AppendJsonString(std::string_view text, std::string *out);

// True for a name CloudEvents allows for an attribute: 1 to 20 of a-z and
// 0-9 (the spec's "SHOULD NOT exceed 20 characters" taken as the limit, so
// that every consumer's SDK accepts the attributes outbox makes).
bool IsCloudEventsAttributeName(std::string_view name);

}  // namespace outbox
