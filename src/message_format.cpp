// Message layouts per route format (see message_format.hpp).
#include "message_format.hpp"

#include <cstdio>

#include "partition_calendar.hpp"
#include "sink.hpp"

namespace outbox {
namespace {

constexpr std::string_view kJsonContentType = "application/json";

// Context attributes of CloudEvents 1.0, the partitioning extension's
// attribute, and ours: user headers never take these names.
constexpr std::string_view kReservedAttributes[] = {
    "specversion", "id",      "source", "type",        "time",         "datacontenttype",
    "dataschema",  "subject", "data",   "data_base64", "partitionkey", "outboxheaders"};

bool IsReservedAttribute(std::string_view name) {
  for (std::string_view reserved : kReservedAttributes) {
    if (name == reserved) return true;
  }
  return false;
}

// Whether a user header name reads as `ours` (ASCII lowercase) to a consumer
// that folds case, Unicode included: besides ASCII letters, the four
// characters whose case mapping is an ASCII letter (U+0130 and U+0131 to
// 'i', U+017F to 's', the Kelvin sign U+212A to 'k'), which Java's
// equalsIgnoreCase and Go's strings.ToLower turn into them.
bool FoldsTo(std::string_view name, std::string_view ours) {
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
  return i == name.size() && j == ours.size();
}

// Kafka header names outbox sets, or that consumers of the format read as
// what outbox sets, beyond the headers it sent for this message: a user
// header of such a name (in any case, FoldsTo) is not sent. All of ours are
// ASCII lowercase. A consumer that reads
// the last header of a name (Java's lastHeader) or folds case would
// otherwise take the caller's value for the event id, type or source.
constexpr std::string_view kCloudEventsKafkaReserved[] = {
    "ce_datacontenttype", "ce_partitionkey", "ce_data", "ce_data_base64", "ce_outboxheaders"};

// Whether a user header named `name` would stand in for one of ours: one of
// the `n` headers outbox sent first, or a name the format reserves.
bool CollidesWithOurs(std::string_view name, MessageFormat format, const Header *ours, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (FoldsTo(name, ours[i].name)) return true;
  }
  if (format == MessageFormat::kCloudEvents) {
    for (std::string_view reserved : kCloudEventsKafkaReserved) {
      if (FoldsTo(name, reserved)) return true;
    }
  }
  return false;
}

void AppendMember(std::string_view name, std::string_view value, std::string *out) {
  if (out->back() != '{') out->push_back(',');
  AppendJsonString(name, out);
  out->push_back(':');
  AppendJsonString(value, out);
}

// The structured-mode CloudEvent of a message (compact JSON object).
void AppendCloudEvent(const OutMessage &m, std::string *out) {
  out->push_back('{');
  AppendMember("specversion", "1.0", out);
  AppendMember("id", m.id, out);
  AppendMember("source", m.source, out);
  AppendMember("type", m.topic, out);
  std::string time;
  AppendRfc3339(m.created_at, &time);
  AppendMember("time", time, out);
  AppendMember("datacontenttype", kJsonContentType, out);
  if (m.has_key) AppendMember("partitionkey", m.key, out);
  // Headers whose names cannot be attributes are kept together, in text.
  std::string others;
  for (size_t i = 0; i < m.header_count; ++i) {
    const Header &h = m.headers[i];
    if (IsCloudEventsAttributeName(h.name) && !IsReservedAttribute(h.name)) {
      AppendMember(h.name, h.value, out);
    } else {
      others.push_back(others.empty() ? '{' : ',');
      AppendJsonString(h.name, &others);
      others.push_back(':');
      AppendJsonString(h.value, &others);
    }
  }
  if (!others.empty()) {
    others.push_back('}');
    AppendMember("outboxheaders", others, out);
  }
  out->append(",\"data\":");
  out->append(m.payload.empty() ? std::string_view("null") : m.payload);
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
  // Never empty (a jsonb value); "null" keeps the envelope valid JSON if it were.
  out->append(",\"payload\":");
  out->append(m.payload.empty() ? std::string_view("null") : m.payload);
  out->append(",\"headers\":");
  out->append(m.headers_json.empty() ? std::string_view("{}") : m.headers_json);
  out->push_back('}');
}

}  // namespace

std::optional<MessageFormat> ParseMessageFormat(std::string_view name) {
  if (name == "raw") return MessageFormat::kRaw;
  if (name == "cloudevents") return MessageFormat::kCloudEvents;
  if (name == "debezium") return MessageFormat::kDebezium;
  return std::nullopt;
}

std::string_view MessageFormatName(MessageFormat format) {
  switch (format) {
    case MessageFormat::kCloudEvents:
      return "cloudevents";
    case MessageFormat::kDebezium:
      return "debezium";
    case MessageFormat::kRaw:
      break;
  }
  return "raw";
}

bool IsCloudEventsAttributeName(std::string_view name) {
  if (name.empty()) return false;
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
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
      out->push_back({"ce_specversion", "1.0"});
      out->push_back({"ce_id", m.id});
      out->push_back({"ce_source", m.source});
      out->push_back({"ce_type", m.topic});
      AppendRfc3339(m.created_at, scratch);
      out->push_back({"ce_time", *scratch});
      out->push_back({"content-type", kJsonContentType});
      break;
    case MessageFormat::kDebezium:
      out->push_back({"id", m.id});
      break;
  }
  const size_t ours = out->size();
  for (size_t i = 0; i < m.header_count; ++i) {
    // Not taken: a user header of a name outbox sets (README, "Message
    // formats"). User headers may repeat each other's names as they like.
    if (CollidesWithOurs(m.headers[i].name, m.format, out->data(), ours)) continue;
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
      // Debezium Server names the field after the record key, "default"
      // when there is none.
      *fields = {m.has_key ? m.key : std::string_view("default"), m.payload};
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
      out->append(m.payload);
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

}  // namespace outbox
