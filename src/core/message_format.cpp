// Message layouts per route format (see message_format.hpp).
#include "core/message_format.hpp"

#include <cstdio>

#include "core/partition_calendar.hpp"
#include "core/sink.hpp"

namespace outbox {
namespace {

constexpr std::string_view kJsonContentType = "application/json";

// The longest attribute name CloudEvents 1.0 allows ("SHOULD NOT exceed 20
// characters"): SDKs may refuse longer ones.
constexpr size_t kMaxAttributeName = 20;

// Context attributes of CloudEvents 1.0, the partitioning extension's
// attribute, and ours: user headers never take these names, on either
// broker (outbox sets them, or a binding maps them to what outbox sets:
// datacontenttype is Kafka's content-type, partitionkey its record key).
constexpr std::string_view kReservedAttributes[] = {
    "specversion", "id",      "source", "type",        "time",         "datacontenttype",
    "dataschema",  "subject", "data",   "data_base64", "partitionkey", "outboxheaders"};

bool IsReservedAttribute(std::string_view name) {
  for (std::string_view reserved : kReservedAttributes) {
    if (name == reserved) return true;
  }
  return false;
}

// Whether a user header becomes a CloudEvents extension attribute of its own
// name; the same rule for Kafka and Redis, so a consumer finds a header in
// the same attribute whichever broker carried the event.
bool IsExtensionHeader(const Header &header) {
  return IsCloudEventsAttributeName(header.name) && !IsReservedAttribute(header.name);
}

// The payload as JSON text. Never empty (a jsonb value); "null" keeps what
// embeds it valid JSON if it were.
std::string_view JsonPayload(const OutMessage &m) {
  return m.payload.empty() ? std::string_view("null") : m.payload;
}

// Whether a user header name reads as `ours` (ASCII lowercase) to a consumer
// that folds case, Unicode included: besides ASCII letters, the four
// characters whose case mapping is an ASCII letter (U+0130 and U+0131 to
// 'i', U+017F to 's', the Kelvin sign U+212A to 'k'), which Java's
// equalsIgnoreCase and Go's strings.ToLower turn into them.
// With `prefix`, whether the name begins with what reads as `ours`.
bool FoldsTo(std::string_view name, std::string_view ours, bool prefix = false) {
  size_t i = 0, j = 0;
  while (i < name.size() && j < ours.size()) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(name[k]); };
    char c;
    if (b(i) < 0x80) {
      c = name[i] >= 'A' && name[i] <= 'Z' ? static_cast<char>(name[i] - 'A' + 'a') : name[i];
      i += 1;
    } else if (i + 1 < name.size() && b(i) == 0xC4 && (b(i + 1) == 0xB0 || b(i + 1) == 0xB1)) {
      c = 'i';
      i += 2;
    } else if (i + 1 < name.size() && b(i) == 0xC5 && b(i + 1) == 0xBF) {
      c = 's';
      i += 2;
    } else if (i + 2 < name.size() && b(i) == 0xE2 && b(i + 1) == 0x84 && b(i + 2) == 0xAA) {
      c = 'k';
      i += 3;
    } else {
      return false;
    }
    if (c != ours[j++]) return false;
  }
  return (prefix || i == name.size()) && j == ours.size();
}

// Whether a user header stays off a Kafka record in any format: the names
// some format of outbox sets (outbox-id and outbox-topic in raw, id in
// Debezium's, content-type and every ce_ header in CloudEvents'). One set
// for every format, because the role that emits picks the topic, and so can
// send a record of one route's format into a topic whose consumers read
// another's (a catch-all raw route beside a CloudEvents one): a raw record
// must not read as a CloudEvent, nor a Debezium one as outbox's raw.
bool ReservedOnKafka(std::string_view name) {
  return FoldsTo(name, "outbox-id") || FoldsTo(name, "outbox-topic") || FoldsTo(name, "id") ||
         FoldsTo(name, "content-type") || FoldsTo(name, "ce_", true) || FoldsTo(name, "ce-", true);
}

// The same for brokers of body and headers, where raw also sets outbox-key.
bool ReservedOnHeadered(std::string_view name) {
  return ReservedOnKafka(name) || FoldsTo(name, "outbox-key");
}

// Whether a user header named `name` would stand in for one of the `n`
// Kafka headers outbox sent first: a consumer that reads the last header of
// a name (Java's lastHeader) or folds case would otherwise take the caller's
// value for the event id or topic. All of ours are ASCII lowercase.
bool CollidesWithOurs(std::string_view name, const Header *ours, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (FoldsTo(name, ours[i].name)) return true;
  }
  return false;
}

// Whether header i stays out of a Debezium Server Redis entry:
// - the entry's own fields are "key", "value" and "ID", and Debezium Server
//   upper-cases header names (Java's toUpperCase, which makes "ıd" "ID"), so
//   a header of these names in any case would stand in for ours;
// - the fields of outbox's other formats ("id", "topic", "payload",
//   "headers", "cloudevent") would let the entry read as one of theirs to a
//   consumer that folds case, in a stream that routes of several formats
//   share;
// - an earlier header with the same upper-cased name: an entry (and its JSON
//   object) never holds a name twice, which consumers would resolve
//   differently (first or last wins) or refuse.
bool DebeziumRedisSkips(const OutMessage &m, size_t i) {
  const std::string_view name = m.headers[i].name;
  if (FoldsTo(name, "id") || FoldsTo(name, "key") || FoldsTo(name, "value") ||
      FoldsTo(name, "topic") || FoldsTo(name, "payload") || FoldsTo(name, "headers") ||
      FoldsTo(name, "cloudevent")) {
    return true;
  }
  const auto upper = [](char c) {
    return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
  };
  for (size_t j = 0; j < i; ++j) {
    const std::string_view earlier = m.headers[j].name;
    if (earlier.size() != name.size()) continue;
    size_t k = 0;
    while (k < name.size() && upper(earlier[k]) == upper(name[k])) ++k;
    if (k == name.size()) return true;
  }
  return false;
}

// Appends `name` with its ASCII letters upper-cased, as Debezium Server
// names a header's field. Other bytes are kept, so the length is the same.
void AppendUpper(std::string_view name, std::string *out) {
  for (const char c : name) {
    out->push_back(c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c);
  }
}

// The key Debezium Server writes: its null.key, "default", without one.
std::string_view DebeziumKey(const OutMessage &m) {
  return m.has_key ? m.key : std::string_view("default");
}

// Appends the Debezium record value: EventRouter passes the payload column
// on as a string unless table.expand.json.payload is set, and the JSON
// converter writes a string as a JSON string literal.
void AppendDebeziumValue(const OutMessage &m, std::string *out) {
  if (m.format == MessageFormat::kDebezium) {  // not kDebezium010: 0.1.0 sent the payload
    AppendJsonString(JsonPayload(m), out);
  } else {
    out->append(JsonPayload(m));
  }
}

void AppendMember(std::string_view name, std::string_view value, std::string *out) {
  if (out->back() != '{') out->push_back(',');
  AppendJsonString(name, out);
  out->push_back(':');
  AppendJsonString(value, out);
}

// Appends the attribute outboxheaders of a CloudEvent: the user headers
// that are not extension attributes, as a compact JSON object; nothing when
// there are none.
void AppendOtherHeaders(const OutMessage &m, std::string *out) {
  const size_t start = out->size();
  for (size_t i = 0; i < m.header_count; ++i) {
    const Header &h = m.headers[i];
    if (IsExtensionHeader(h)) continue;
    out->push_back(out->size() == start ? '{' : ',');
    AppendJsonString(h.name, out);
    out->push_back(':');
    AppendJsonString(h.value, out);
  }
  if (out->size() != start) out->push_back('}');
}

// The structured-mode CloudEvent of a message (compact JSON object).
void AppendCloudEvent(const OutMessage &m, std::string *out) {
  out->push_back('{');
  AppendMember("specversion", "1.0", out);
  AppendMember("id", m.id, out);
  AppendMember("source", m.source, out);
  AppendMember("type", m.topic, out);
  std::string text;
  AppendRfc3339(m.created_at, &text);
  AppendMember("time", text, out);
  AppendMember("datacontenttype", kJsonContentType, out);
  if (m.has_key) AppendMember("partitionkey", m.key, out);
  for (size_t i = 0; i < m.header_count; ++i) {
    if (IsExtensionHeader(m.headers[i])) AppendMember(m.headers[i].name, m.headers[i].value, out);
  }
  text.clear();
  AppendOtherHeaders(m, &text);
  if (!text.empty()) AppendMember("outboxheaders", text, out);
  out->append(",\"data\":");
  out->append(JsonPayload(m));
  out->push_back('}');
}

// The Debezium Server entry of a message as one JSON object, for modes
// publish and list: the stream entry's fields in its order, the value as
// the JSON it is rather than text holding JSON.
void AppendDebeziumEnvelope(const OutMessage &m, std::string *out) {
  out->push_back('{');
  AppendMember("key", DebeziumKey(m), out);
  out->append(",\"value\":");
  AppendDebeziumValue(m, out);
  AppendMember("ID", m.id, out);
  std::string name;
  for (size_t i = 0; i < m.header_count; ++i) {
    const Header &h = m.headers[i];
    if (DebeziumRedisSkips(m, i)) continue;
    name.clear();
    AppendUpper(h.name, &name);
    AppendMember(name, h.value, out);
  }
  out->push_back('}');
}

// The raw envelope of modes publish and list.
void AppendRawEnvelope(const OutMessage &m, std::string *out) {
  out->append("{\"id\":");
  AppendJsonString(m.id, out);
  out->append(",\"topic\":");
  AppendJsonString(m.topic, out);
  out->append(",\"key\":");
  if (m.has_key) {
    AppendJsonString(m.key, out);
  } else {
    out->append("null");
  }
  out->append(",\"payload\":");
  out->append(JsonPayload(m));
  out->append(",\"headers\":");
  out->append(m.headers_json.empty() ? std::string_view("{}") : m.headers_json);
  out->push_back('}');
}

// CloudEvents' binary content mode as headers: the attributes named
// `prefix` + attribute ("ce_" on Kafka, "ce-" in the NATS and HTTP
// bindings), content-type, with `key_attribute` the key as partitionkey,
// the extension attributes, then outboxheaders. Every user header maps to an
// attribute (an extension of its own name, or a member of outboxheaders),
// none is sent under its own name: no user header can stand in for one of
// ours. What the views point to is built first in *scratch (empty on entry),
// as *scratch must not grow after.
void CloudEventsBinaryHeaders(const OutMessage &m, std::string_view prefix, bool key_attribute,
                              std::string *scratch, std::vector<Header> *out) {
  enum Fixed { kSpecVersion, kId, kSource, kType, kTime, kPartitionKey, kOutboxHeaders, kFixed };
  static constexpr std::string_view kNames[kFixed] = {
      "specversion", "id", "source", "type", "time", "partitionkey", "outboxheaders"};
  AppendRfc3339(m.created_at, scratch);
  const size_t time_end = scratch->size();
  size_t name_at[kFixed];
  for (int f = 0; f < kFixed; ++f) {
    name_at[f] = scratch->size();
    scratch->append(prefix);
    scratch->append(kNames[f]);
  }
  const size_t extensions_at = scratch->size();
  for (size_t i = 0; i < m.header_count; ++i) {
    if (!IsExtensionHeader(m.headers[i])) continue;
    scratch->append(prefix);
    scratch->append(m.headers[i].name);
  }
  const size_t names_end = scratch->size();
  AppendOtherHeaders(m, scratch);
  const std::string_view built(*scratch);
  const auto name = [&](Fixed f) {
    return built.substr(name_at[f], prefix.size() + kNames[f].size());
  };
  out->push_back({name(kSpecVersion), "1.0"});
  out->push_back({name(kId), m.id});
  out->push_back({name(kSource), m.source});
  out->push_back({name(kType), m.topic});
  out->push_back({name(kTime), built.substr(0, time_end)});
  out->push_back({"content-type", kJsonContentType});
  if (key_attribute && m.has_key) out->push_back({name(kPartitionKey), m.key});
  size_t at = extensions_at;
  for (size_t i = 0; i < m.header_count; ++i) {
    if (!IsExtensionHeader(m.headers[i])) continue;
    const size_t length = prefix.size() + m.headers[i].name.size();
    out->push_back({built.substr(at, length), m.headers[i].value});
    at += length;
  }
  if (built.size() > names_end) out->push_back({name(kOutboxHeaders), built.substr(names_end)});
}

}  // namespace

std::optional<MessageFormat> ParseMessageFormat(std::string_view name) {
  if (name == "raw") return MessageFormat::kRaw;
  if (name == "cloudevents") return MessageFormat::kCloudEvents;
  if (name == "debezium") return MessageFormat::kDebezium;
  if (name == "debezium-expanded") return MessageFormat::kDebeziumExpanded;
  return std::nullopt;
}

std::string_view MessageFormatName(MessageFormat format) {
  switch (format) {
    case MessageFormat::kCloudEvents:
      return "cloudevents";
    case MessageFormat::kDebezium:
    case MessageFormat::kDebezium010:
      return "debezium";
    case MessageFormat::kDebeziumExpanded:
      return "debezium-expanded";
    case MessageFormat::kRaw:
      break;
  }
  return "raw";
}

bool IsCloudEventsAttributeName(std::string_view name) {
  if (name.empty() || name.size() > kMaxAttributeName) return false;
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

std::string_view KafkaValue(const OutMessage &m, std::string *scratch) {
  if (m.format != MessageFormat::kDebezium) return m.payload;
  scratch->clear();
  AppendDebeziumValue(m, scratch);
  return *scratch;
}

void KafkaHeaders(const OutMessage &m, std::string *scratch, std::vector<Header> *out) {
  out->clear();
  scratch->clear();
  switch (m.format) {
    case MessageFormat::kRaw:
      out->push_back({"outbox-id", m.id});
      out->push_back({"outbox-topic", m.topic});
      break;
    case MessageFormat::kCloudEvents:
      CloudEventsBinaryHeaders(m, "ce_", false, scratch, out);
      return;
    case MessageFormat::kDebezium:
    case MessageFormat::kDebeziumExpanded:
    case MessageFormat::kDebezium010:
      out->push_back({"id", m.id});
      break;
  }
  const size_t ours = out->size();
  for (size_t i = 0; i < m.header_count; ++i) {
    // Not taken: a user header of a name outbox sets in this format or
    // another (docs/formats.md). User headers may repeat each other's names
    // as they like.
    if (CollidesWithOurs(m.headers[i].name, out->data(), ours) ||
        ReservedOnKafka(m.headers[i].name)) {
      continue;
    }
    out->push_back(m.headers[i]);
  }
}

void RedisStreamFields(const OutMessage &m, std::string *scratch,
                       std::vector<std::string_view> *fields) {
  fields->clear();
  scratch->clear();
  switch (m.format) {
    case MessageFormat::kRaw:
      *fields = {"id",      m.id,
                 "topic",   m.topic,
                 "key",     m.has_key ? m.key : std::string_view(),
                 "payload", m.payload,
                 "headers", m.headers_json.empty() ? "{}" : m.headers_json};
      break;
    case MessageFormat::kCloudEvents:
      AppendCloudEvent(m, scratch);
      *fields = {"cloudevent", *scratch};
      break;
    case MessageFormat::kDebezium:
    case MessageFormat::kDebeziumExpanded: {
      // Debezium Server's extended entry: key, value, then the record's
      // headers, upper-cased (so the event id is "ID"). Built first, as
      // *scratch must not grow once views point into it.
      AppendDebeziumValue(m, scratch);
      const size_t value_end = scratch->size();
      for (size_t i = 0; i < m.header_count; ++i) {
        if (!DebeziumRedisSkips(m, i)) AppendUpper(m.headers[i].name, scratch);
      }
      const std::string_view built(*scratch);
      *fields = {"key", DebeziumKey(m), "value", built.substr(0, value_end), "ID", m.id};
      size_t at = value_end;
      for (size_t i = 0; i < m.header_count; ++i) {
        const Header &h = m.headers[i];
        if (DebeziumRedisSkips(m, i)) continue;
        fields->push_back(built.substr(at, h.name.size()));
        fields->push_back(h.value);
        at += h.name.size();
      }
      break;
    }
    case MessageFormat::kDebezium010:
      // Debezium Server's default entry as outbox 0.1.0 wrote it: the
      // record key names the field.
      *fields = {DebeziumKey(m), JsonPayload(m)};
      break;
  }
}

void AppendRedisBody(const OutMessage &m, std::string *out) {
  switch (m.format) {
    case MessageFormat::kRaw:
      AppendRawEnvelope(m, out);
      break;
    case MessageFormat::kCloudEvents:
      AppendCloudEvent(m, out);
      break;
    case MessageFormat::kDebezium:
    case MessageFormat::kDebeziumExpanded:
      AppendDebeziumEnvelope(m, out);
      break;
    case MessageFormat::kDebezium010:
      out->append(JsonPayload(m));
      break;
  }
}

void AppendRfc3339(int64_t pg_timestamp_us, std::string *out) {
  const int64_t day = DayOf(pg_timestamp_us);
  const CivilDate date = CivilFromDay(day);
  const int64_t of_day = pg_timestamp_us - DayStart(day);  // 0 <= of_day < a day
  const int64_t seconds = of_day / 1000000;
  char text[40];
  std::snprintf(text, sizeof text, "%04d-%02u-%02uT%02d:%02d:%02d.%06dZ", date.year, date.month,
                date.day, static_cast<int>(seconds / 3600), static_cast<int>(seconds / 60 % 60),
                static_cast<int>(seconds % 60), static_cast<int>(of_day % 1000000));
  out->append(text);
}

void AppendJsonString(std::string_view text, std::string *out) {
  out->push_back('"');
  for (const char c : text) {
    switch (c) {
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      default:
        if (static_cast<unsigned char>(c) < ' ') {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out->append(escaped);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

bool HeaderedFormat(MessageFormat format) {
  return format == MessageFormat::kRaw || format == MessageFormat::kCloudEvents;
}

std::string_view HeaderedBody(const OutMessage &m, CloudEventsMode mode, std::string *scratch) {
  scratch->clear();
  if (m.format != MessageFormat::kCloudEvents || mode == CloudEventsMode::kBinary) {
    return JsonPayload(m);
  }
  AppendCloudEvent(m, scratch);
  return *scratch;
}

void HeaderedHeaders(const OutMessage &m, CloudEventsMode mode, std::string *scratch,
                     std::vector<Header> *out) {
  out->clear();
  scratch->clear();
  if (m.format == MessageFormat::kCloudEvents) {
    // The protocol bindings' "ce-" prefix, and the key as an attribute
    // (there is no record key to carry it).
    if (mode == CloudEventsMode::kBinary) CloudEventsBinaryHeaders(m, "ce-", true, scratch, out);
    return;
  }
  out->push_back({"outbox-id", m.id});
  out->push_back({"outbox-topic", m.topic});
  if (m.has_key) out->push_back({"outbox-key", m.key});
  for (size_t i = 0; i < m.header_count; ++i) {
    // Not taken: a name outbox sets in this format or another (as on
    // Kafka); user headers may repeat each other's names as they like.
    if (ReservedOnHeadered(m.headers[i].name)) continue;
    out->push_back(m.headers[i]);
  }
}

}  // namespace outbox
