// Message layouts per route format: what consumers of each convention read.
#include "core/message_format.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "core/sink.hpp"

namespace outbox {
namespace {

// 2026-11-21T10:00:00.123456Z as a timestamptz (microseconds since 2000).
constexpr int64_t kTime = (9821LL * 86400 + 10 * 3600) * 1000000 + 123456;

struct Fixture {
  Header headers[3] = {{"traceparent", "00-abc-def-01"}, {"X-Tenant", "acme"}, {"id", "user-id"}};
  OutMessage m;
  Fixture(MessageFormat format, bool with_key = true, size_t header_count = 3) {
    m.id = "01890a5d-ac96-774b-bcce-b302099a8057";
    m.topic = "orders.created";
    m.target = "orders";
    m.has_key = with_key;
    m.key = with_key ? "order-7" : "";
    m.payload = R"({"n":1})";
    m.headers = headers;
    m.header_count = header_count;
    m.headers_json = header_count == 0 ? "{}"
                                       : R"({"traceparent":"00-abc-def-01","X-Tenant":"acme",)"
                                         R"("id":"user-id"})";
    m.format = format;
    m.created_at = kTime;
    m.source = "/outbox/shop";
  }
};

std::vector<std::pair<std::string, std::string>> Flatten(const std::vector<Header> &headers) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Header &h : headers) out.emplace_back(h.name, h.value);
  return out;
}

using Pairs = std::vector<std::pair<std::string, std::string>>;

using Strings = std::vector<std::string>;

Strings Fields(const OutMessage &m) {
  std::string scratch;
  std::vector<std::string_view> fields;
  RedisStreamFields(m, &scratch, &fields);
  return Strings(fields.begin(), fields.end());
}

Pairs Kafka(const OutMessage &m) {
  std::string scratch;
  std::vector<Header> headers;
  KafkaHeaders(m, &scratch, &headers);
  return Flatten(headers);
}

std::string Body(const OutMessage &m) {
  std::string body;
  AppendRedisBody(m, &body);
  return body;
}

std::string Lower(std::string_view name) {
  std::string lower(name);
  for (char &c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

const std::vector<MessageFormat> kFormats = {MessageFormat::kRaw, MessageFormat::kCloudEvents,
                                             MessageFormat::kDebezium,
                                             MessageFormat::kDebeziumExpanded};

TEST(MessageFormat, NamesParseAndNothingElse) {
  EXPECT_EQ(ParseMessageFormat("raw"), MessageFormat::kRaw);
  EXPECT_EQ(ParseMessageFormat("cloudevents"), MessageFormat::kCloudEvents);
  EXPECT_EQ(ParseMessageFormat("debezium"), MessageFormat::kDebezium);
  EXPECT_EQ(ParseMessageFormat("debezium-expanded"), MessageFormat::kDebeziumExpanded);
  for (const char *bad : {"", "RAW", "json", "cloudevents ", "debezium\n", "avro",
                          "debezium_expanded", "Debezium-Expanded", "debezium-"}) {
    EXPECT_FALSE(ParseMessageFormat(bad).has_value()) << bad;
  }
  for (MessageFormat f : kFormats) EXPECT_EQ(ParseMessageFormat(MessageFormatName(f)), f);
}

TEST(MessageFormat, RawKafkaHeadersAreTheContractsThenTheUsers) {
  Fixture f(MessageFormat::kRaw);
  EXPECT_EQ(Kafka(f.m), (Pairs{{"outbox-id", std::string(f.m.id)},
                               {"outbox-topic", "orders.created"},
                               {"traceparent", "00-abc-def-01"},
                               {"X-Tenant", "acme"}}));  // "id" is Debezium's: not sent
}

// Only debezium rewrites the payload; the others send it as it is, without
// a copy.
TEST(MessageFormat, KafkaValueIsThePayloadExceptForDebeziumsString) {
  for (MessageFormat format : kFormats) {
    Fixture f(format);
    std::string scratch;
    const std::string_view value = KafkaValue(f.m, &scratch);
    if (format == MessageFormat::kDebezium) {
      EXPECT_EQ(value, R"("{\"n\":1}")");
    } else {
      EXPECT_EQ(value.data(), f.m.payload.data()) << MessageFormatName(format);
      EXPECT_EQ(value, R"({"n":1})");
    }
  }
}

// EventRouter's default (table.expand.json.payload=false) hands the payload
// on as a string, which the JSON converter writes as a string literal: what
// a consumer reads is a JSON string whose content is the payload's JSON.
TEST(MessageFormat, DebeziumValueIsThePayloadAsAJsonStringLiteral) {
  Fixture f(MessageFormat::kDebezium);
  f.m.payload = R"({"s":"a\"b\\c\n","u":"\u0001"})";
  std::string scratch;
  EXPECT_EQ(KafkaValue(f.m, &scratch), R"("{\"s\":\"a\\\"b\\\\c\\n\",\"u\":\"\\u0001\"}")");
  f.m.payload = "7";  // any JSON value, not only objects
  EXPECT_EQ(KafkaValue(f.m, &scratch), R"("7")");
}

TEST(MessageFormat, DebeziumKafkaCarriesTheIdHeaderThenTheUsers) {
  for (MessageFormat format : {MessageFormat::kDebezium, MessageFormat::kDebeziumExpanded}) {
    Fixture f(format);
    // The user's "id" would stand in for the event id: not sent.
    EXPECT_EQ(Kafka(f.m), (Pairs{{"id", std::string(f.m.id)},
                                 {"traceparent", "00-abc-def-01"},
                                 {"X-Tenant", "acme"}}))
        << MessageFormatName(format);
  }
}

TEST(MessageFormat, CloudEventsKafkaSendsExtensionsAsCeHeadersAndTheRestInOutboxHeaders) {
  Fixture f(MessageFormat::kCloudEvents);
  EXPECT_EQ(Kafka(f.m), (Pairs{{"ce_specversion", "1.0"},
                               {"ce_id", std::string(f.m.id)},
                               {"ce_source", "/outbox/shop"},
                               {"ce_type", "orders.created"},
                               {"ce_time", "2026-11-21T10:00:00.123456Z"},
                               {"content-type", "application/json"},
                               {"ce_traceparent", "00-abc-def-01"},
                               {"ce_outboxheaders", R"({"X-Tenant":"acme","id":"user-id"})"}}));
}

TEST(MessageFormat, CloudEventsKafkaWithoutOtherHeadersHasNoOutboxHeaders) {
  Fixture f(MessageFormat::kCloudEvents, true, 1);  // traceparent only
  const Pairs headers = Kafka(f.m);
  ASSERT_EQ(headers.size(), 7u);
  EXPECT_EQ(headers.back(),
            (std::pair<std::string, std::string>{"ce_traceparent", "00-abc-def-01"}));
  Fixture none(MessageFormat::kCloudEvents, true, 0);
  EXPECT_EQ(Kafka(none.m).size(), 6u);
}

// A header is the same attribute whichever broker carries
// the event. Names: valid, reserved (set or reserved by outbox), too long,
// not lowercase alphanumeric.
TEST(MessageFormat, CloudEventsMapsUserHeadersAlikeOnKafkaAndRedis) {
  Header user[] = {{"region", "eu"},
                   {"abcdefghij0123456789", "20 characters"},
                   {"abcdefghij01234567890", "21 characters"},
                   {"specversion", "0.3"},
                   {"source", "forged"},
                   {"partitionkey", "forged"},
                   {"datacontenttype", "text/plain"},
                   {"subject", "s"},
                   {"outboxheaders", "forged"},
                   {"Region", "upper"},
                   {"trace-id", "t"},
                   {"é", "accent"}};
  Fixture f(MessageFormat::kCloudEvents, false, 0);
  f.m.headers = user;
  f.m.header_count = sizeof user / sizeof user[0];
  const std::string others =
      R"({"abcdefghij01234567890":"21 characters","specversion":"0.3","source":"forged",)"
      R"("partitionkey":"forged","datacontenttype":"text/plain","subject":"s",)"
      R"("outboxheaders":"forged","Region":"upper","trace-id":"t","é":"accent"})";
  const Pairs kafka = Kafka(f.m);
  EXPECT_EQ(Pairs(kafka.begin() + 6, kafka.end()),
            (Pairs{{"ce_region", "eu"},
                   {"ce_abcdefghij0123456789", "20 characters"},
                   {"ce_outboxheaders", others}}));
  std::string others_member;
  AppendJsonString(others, &others_member);
  EXPECT_EQ(Body(f.m), "{\"specversion\":\"1.0\",\"id\":\"" + std::string(f.m.id) +
                           R"(","source":"/outbox/shop","type":"orders.created",)"
                           R"("time":"2026-11-21T10:00:00.123456Z",)"
                           R"("datacontenttype":"application/json","region":"eu",)"
                           R"("abcdefghij0123456789":"20 characters","outboxheaders":)" +
                           others_member + R"(,"data":{"n":1}})");
}

// A user header never stands in for one outbox sets (a
// consumer reading the last header of a name, or folding case, would take
// the caller's event id, type or source).
TEST(MessageFormat, UserHeadersNeverForgeOurs) {
  Header forged[] = {{"outbox-id", "forged"}, {"OUTBOX-TOPIC", "forged"},
                     {"ce_id", "forged"},     {"Ce_Source", "forged"},
                     {"ce_type", "forged"},   {"content-type", "x"},
                     {"Content-Type", "x"},   {"ce_specversion", "0.3"},
                     {"ce_time", "x"},        {"ce_datacontenttype", "x"},
                     {"id", "forged"},        {"ID", "forged"},
                     {"type", "forged"},      {"kept", "yes"}};
  const std::vector<std::pair<MessageFormat, Strings>> ours = {
      {MessageFormat::kRaw, {"outbox-id", "outbox-topic"}},
      {MessageFormat::kCloudEvents,
       {"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "content-type"}},
      {MessageFormat::kDebezium, {"id"}},
      {MessageFormat::kDebeziumExpanded, {"id"}}};
  for (const auto &[format, names] : ours) {
    Fixture f(format, true, 0);
    f.m.headers = forged;
    f.m.header_count = sizeof forged / sizeof forged[0];
    Strings seen;
    for (const auto &[name, value] : Kafka(f.m)) {
      const std::string lower = Lower(name);
      if (std::find(names.begin(), names.end(), lower) == names.end()) continue;
      seen.push_back(lower);
      EXPECT_NE(value, "forged") << MessageFormatName(format) << " " << name;
      EXPECT_NE(value, "x") << MessageFormatName(format) << " " << name;
      EXPECT_NE(value, "0.3") << MessageFormatName(format) << " " << name;
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end()) << MessageFormatName(format);
    EXPECT_EQ(seen.size(), names.size()) << MessageFormatName(format);
    if (format != MessageFormat::kCloudEvents) {
      EXPECT_EQ(Kafka(f.m).back().first, "kept") << MessageFormatName(format);
    }
  }
  // CloudEvents sends no user header under its own name: ce_<valid name>,
  // or inside ce_outboxheaders, so none can forge one of ours.
  Fixture ce(MessageFormat::kCloudEvents, true, 0);
  ce.m.headers = forged;
  ce.m.header_count = sizeof forged / sizeof forged[0];
  const Pairs headers = Kafka(ce.m);
  ASSERT_EQ(headers.size(), 8u);
  EXPECT_EQ(headers[6], (std::pair<std::string, std::string>{"ce_kept", "yes"}));
  EXPECT_EQ(headers[7].first, "ce_outboxheaders");
  // Nor names outbox sets in another format: the role that emits picks the
  // topic, so a record of one format can reach another format's consumers.
  Fixture raw(MessageFormat::kRaw);
  EXPECT_EQ(Kafka(raw.m).back().first, "X-Tenant");
}

// A raw or Debezium record never carries what another format's consumers
// trust: CloudEvents' ce_* and content-type, Debezium's id, outbox's raw
// headers (once, a catch-all raw route beside a CloudEvents route let a
// raw record read as a CloudEvent with a forged id, source and type).
TEST(MessageFormat, NoFormatCarriesAnotherFormatsTrustedHeaders) {
  const Header forged[] = {{"ce_specversion", "1.0"},
                           {"ce_id", "forged"},
                           {"CE_SOURCE", "/forged"},
                           {"ce-type", "forged"},
                           {"content-type", "application/cloudevents+json"},
                           {"outbox-id", "forged"},
                           {"Outbox-Topic", "forged"},
                           {"ID", "forged"},
                           {"cE_tİme", "forged"},
                           {"kept", "yes"}};
  for (MessageFormat format :
       {MessageFormat::kRaw, MessageFormat::kDebezium, MessageFormat::kDebeziumExpanded}) {
    Fixture f(format, true, 0);
    f.m.headers = forged;
    f.m.header_count = sizeof forged / sizeof forged[0];
    const Pairs headers = Kafka(f.m);
    for (const auto &[name, value] : headers) EXPECT_NE(value, "forged") << name;
    EXPECT_EQ(headers.back(), (std::pair<std::string, std::string>{"kept", "yes"}))
        << MessageFormatName(format);
  }
}

// Debezium Server never writes a field twice, nor one of outbox's other
// formats' fields: a header that upper-cases to an earlier one's name, or
// names topic, payload, headers or cloudevent in any case, stays out.
TEST(MessageFormat, DebeziumRedisEntryHoldsEachNameOnceAndNoOtherFormatsFields) {
  const Header headers[] = {{"TENANT", "victim"},     {"Tenant", "x"},       {"tenant", "attacker"},
                            {"topic", "forged"},      {"PAYLOAD", "forged"}, {"headers", "forged"},
                            {"CloudEvent", "forged"}, {"other", "kept"}};
  Fixture f(MessageFormat::kDebezium, true, 0);
  f.m.headers = headers;
  f.m.header_count = sizeof headers / sizeof headers[0];
  std::string scratch;
  std::vector<std::string_view> views;
  RedisStreamFields(f.m, &scratch, &views);
  const Strings fields(views.begin(), views.end());
  ASSERT_EQ(fields.size(), 10u);
  EXPECT_EQ(fields[6], "TENANT");
  EXPECT_EQ(fields[7], "victim");
  EXPECT_EQ(fields[8], "OTHER");
  EXPECT_EQ(fields[9], "kept");
  const std::string body = Body(f.m);
  EXPECT_EQ(body.find("attacker"), std::string::npos) << body;
  EXPECT_EQ(body.find("forged"), std::string::npos) << body;
}

// Consumers that fold case beyond ASCII (Java's equalsIgnoreCase, Go's
// strings.ToLower) read these names as ours: U+0130 and U+0131 fold to 'i',
// U+017F to 's', the Kelvin sign U+212A to 'k'.
TEST(MessageFormat, UnicodeNamesThatFoldToOursAreNotSent) {
  const std::vector<std::pair<MessageFormat, Strings>> cases = {
      {MessageFormat::kRaw, {"outbox-İd", "OUTBOX-TOPıC"}},
      {MessageFormat::kCloudEvents, {"ce_ıd", "ce_ſource", "ce_partitionKey", "ce_tİme", "ıd"}},
      {MessageFormat::kDebezium, {"İD", "ıd"}},
      {MessageFormat::kDebeziumExpanded, {"İD", "ıd"}}};
  for (const auto &[format, names] : cases) {
    std::vector<Header> user;
    for (const std::string &n : names) user.push_back({n, "forged"});
    user.push_back({"kept", "yes"});
    Fixture f(format, true, 0);
    f.m.headers = user.data();
    f.m.header_count = user.size();
    for (const auto &[name, value] : Kafka(f.m)) {
      // CloudEvents keeps them, as data, in ce_outboxheaders.
      if (name != "ce_outboxheaders") {
        EXPECT_NE(value, "forged") << MessageFormatName(format) << " " << name;
      }
    }
    if (format == MessageFormat::kCloudEvents) {
      EXPECT_EQ(Kafka(f.m)[6].first, "ce_kept");
    } else {
      EXPECT_EQ(Kafka(f.m).back().first, "kept") << MessageFormatName(format);
    }
  }
  // Other non-ASCII names are the user's.
  Header other[] = {{"outbox-ïd", "mine"}};
  Fixture f(MessageFormat::kRaw, true, 0);
  f.m.headers = other;
  f.m.header_count = 1;
  EXPECT_EQ(Kafka(f.m).back().second, "mine");
}

TEST(MessageFormat, RawRedisStreamFieldsAndEnvelope) {
  Fixture f(MessageFormat::kRaw, false, 0);
  EXPECT_EQ(Fields(f.m), (Strings{"id", std::string(f.m.id), "topic", "orders.created", "key", "",
                                  "payload", R"({"n":1})", "headers", "{}"}));
  EXPECT_EQ(Body(f.m),
            "{\"id\":\"" + std::string(f.m.id) +
                R"(","topic":"orders.created","key":null,"payload":{"n":1},"headers":{}})");
}

TEST(MessageFormat, CloudEventsRedisIsStructuredJson) {
  Fixture f(MessageFormat::kCloudEvents);
  const std::string body = Body(f.m);
  // Valid attribute names become attributes; "X-Tenant" cannot, and "id"
  // is the event's own id: both stay, in outboxheaders.
  EXPECT_EQ(body,
            "{\"specversion\":\"1.0\",\"id\":\"" + std::string(f.m.id) +
                R"(","source":"/outbox/shop","type":"orders.created",)"
                R"("time":"2026-11-21T10:00:00.123456Z","datacontenttype":"application/json",)"
                R"("partitionkey":"order-7","traceparent":"00-abc-def-01",)"
                R"("outboxheaders":"{\"X-Tenant\":\"acme\",\"id\":\"user-id\"}",)"
                R"("data":{"n":1}})");
  EXPECT_EQ(Fields(f.m), (Strings{"cloudevent", body}));
}

TEST(MessageFormat, CloudEventsWithoutKeyHasNoPartitionKey) {
  Fixture f(MessageFormat::kCloudEvents, false, 0);
  const std::string body = Body(f.m);
  EXPECT_EQ(body.find("partitionkey"), std::string::npos);
  EXPECT_EQ(body.find("outboxheaders"), std::string::npos);
}

// Debezium Server's Redis sink with message.format=extended: fields key,
// value, then the record headers upper-cased, so the event id is "ID".
TEST(MessageFormat, DebeziumRedisStreamIsDebeziumServersExtendedEntry) {
  Fixture f(MessageFormat::kDebezium);
  // The user's "id" would be a second "ID": not sent.
  EXPECT_EQ(Fields(f.m),
            (Strings{"key", "order-7", "value", R"("{\"n\":1}")", "ID", std::string(f.m.id),
                     "TRACEPARENT", "00-abc-def-01", "X-TENANT", "acme"}));
  Fixture expanded(MessageFormat::kDebeziumExpanded);
  EXPECT_EQ(Fields(expanded.m),
            (Strings{"key", "order-7", "value", R"({"n":1})", "ID", std::string(f.m.id),
                     "TRACEPARENT", "00-abc-def-01", "X-TENANT", "acme"}));
}

// Debezium Server writes its null.key, "default", for a record without a key.
TEST(MessageFormat, DebeziumRedisWithoutKeyUsesDebeziumServersNullKey) {
  for (MessageFormat format : {MessageFormat::kDebezium, MessageFormat::kDebeziumExpanded}) {
    Fixture f(format, false, 0);
    const Strings fields = Fields(f.m);
    ASSERT_EQ(fields.size(), 6u) << MessageFormatName(format);
    EXPECT_EQ(fields[0], "key");
    EXPECT_EQ(fields[1], "default");
    EXPECT_EQ(Body(f.m).rfind(R"({"key":"default",)", 0), 0u) << MessageFormatName(format);
  }
}

// The entry's own fields are key, value and ID: a user header that would
// read as one of them, once upper-cased or case-folded, is not sent.
TEST(MessageFormat, DebeziumRedisHeadersNeverForgeKeyValueOrId) {
  Header user[] = {{"Id", "forged"},    {"ıd", "forged"},    {"KEY", "forged"}, {"key", "forged"},
                   {"Value", "forged"}, {"valUe", "forged"}, {"keys", "mine"},  {"ïd", "mine"}};
  for (MessageFormat format : {MessageFormat::kDebezium, MessageFormat::kDebeziumExpanded}) {
    Fixture f(format, true, 0);
    f.m.headers = user;
    f.m.header_count = sizeof user / sizeof user[0];
    const Strings fields = Fields(f.m);
    ASSERT_EQ(fields.size(), 10u) << MessageFormatName(format);
    EXPECT_EQ(Strings(fields.begin() + 4, fields.end()),
              (Strings{"ID", std::string(f.m.id), "KEYS", "mine", "ïD", "mine"}))
        << MessageFormatName(format);
    EXPECT_EQ(Body(f.m).find("forged"), std::string::npos) << MessageFormatName(format);
  }
}

// Modes publish and list send the stream entry as one JSON object: the same
// members in the same order, the value as the JSON it is.
TEST(MessageFormat, DebeziumRedisPublishAndListSendTheEntryAsJson) {
  Fixture f(MessageFormat::kDebezium);
  const std::string tail =
      ",\"ID\":\"" + std::string(f.m.id) + R"(","TRACEPARENT":"00-abc-def-01","X-TENANT":"acme"})";
  EXPECT_EQ(Body(f.m), R"({"key":"order-7","value":"{\"n\":1}")" + tail);
  Fixture expanded(MessageFormat::kDebeziumExpanded);
  EXPECT_EQ(Body(expanded.m), R"({"key":"order-7","value":{"n":1})" + tail);
}

// A debezium route of a database still at version 0.1.0 (until ALTER
// EXTENSION UPDATE) sends what 0.1.0 sent: the payload as JSON on Kafka with
// header id, and on Redis Debezium Server's default entry, one field named
// after the key; the payload alone for publish and list.
TEST(MessageFormat, Debezium010SendsWhatOutbox010Sent) {
  Fixture f(MessageFormat::kDebezium010);
  std::string scratch;
  EXPECT_EQ(KafkaValue(f.m, &scratch), R"({"n":1})");
  const Pairs headers = Kafka(f.m);
  ASSERT_FALSE(headers.empty());
  EXPECT_EQ(headers[0], (std::pair<std::string, std::string>{"id", std::string(f.m.id)}));
  EXPECT_EQ(Fields(f.m), (Strings{"order-7", R"({"n":1})"}));
  EXPECT_EQ(Body(f.m), R"({"n":1})");
  Fixture keyless(MessageFormat::kDebezium010, /*with_key=*/false);
  EXPECT_EQ(Fields(keyless.m), (Strings{"default", R"({"n":1})"}));
  // No route names it: it is debezium as far as anyone reading routes knows.
  EXPECT_EQ(MessageFormatName(MessageFormat::kDebezium010), "debezium");
}

TEST(MessageFormat, TimesAreRfc3339InUtcWithMicroseconds) {
  std::string out;
  AppendRfc3339(kTime, &out);
  EXPECT_EQ(out, "2026-11-21T10:00:00.123456Z");
  out.clear();
  AppendRfc3339(0, &out);
  EXPECT_EQ(out, "2000-01-01T00:00:00.000000Z");
  out.clear();
  AppendRfc3339(-1, &out);  // before PostgreSQL's epoch: the day before, at its end
  EXPECT_EQ(out, "1999-12-31T23:59:59.999999Z");
  out.clear();
  AppendRfc3339((10286LL * 86400 + 86399) * 1000000 + 7, &out);  // a leap day's last second
  EXPECT_EQ(out, "2028-02-29T23:59:59.000007Z");
}

TEST(MessageFormat, AttributeNamesAreLowercaseAlphanumericUpTo20) {
  EXPECT_TRUE(IsCloudEventsAttributeName("traceparent"));
  EXPECT_TRUE(IsCloudEventsAttributeName("x1"));
  EXPECT_TRUE(IsCloudEventsAttributeName("abcdefghij0123456789"));
  for (const char *bad : {"", "X", "trace-parent", "a_b", "é", "a b", "abcdefghij01234567890"}) {
    EXPECT_FALSE(IsCloudEventsAttributeName(bad)) << bad;
  }
}

Pairs Headered(const OutMessage &m, CloudEventsMode mode) {
  std::string scratch;
  std::vector<Header> headers;
  HeaderedHeaders(m, mode, &scratch, &headers);
  return Flatten(headers);
}

TEST(MessageFormat, HeaderedBrokersTakeRawAndCloudEventsOnly) {
  EXPECT_TRUE(HeaderedFormat(MessageFormat::kRaw));
  EXPECT_TRUE(HeaderedFormat(MessageFormat::kCloudEvents));
  EXPECT_FALSE(HeaderedFormat(MessageFormat::kDebezium));
  EXPECT_FALSE(HeaderedFormat(MessageFormat::kDebeziumExpanded));
  EXPECT_FALSE(HeaderedFormat(MessageFormat::kDebezium010));
}

TEST(MessageFormat, RawHeaderedMessageIsThePayloadWithIdTopicAndKeyHeaders) {
  Fixture f(MessageFormat::kRaw);
  std::string scratch;
  EXPECT_EQ(HeaderedBody(f.m, CloudEventsMode::kBinary, &scratch), R"({"n":1})");
  EXPECT_EQ(HeaderedBody(f.m, CloudEventsMode::kStructured, &scratch), R"({"n":1})");
  // The user's "id" is Debezium's id header: not taken, as on Kafka.
  const Pairs expected = {{"outbox-id", std::string(f.m.id)},
                          {"outbox-topic", "orders.created"},
                          {"outbox-key", "order-7"},
                          {"traceparent", "00-abc-def-01"},
                          {"X-Tenant", "acme"}};
  EXPECT_EQ(Headered(f.m, CloudEventsMode::kBinary), expected);
  EXPECT_EQ(Headered(f.m, CloudEventsMode::kStructured), expected);
}

TEST(MessageFormat, RawHeaderedMessageWithoutKeyHasNoKeyHeader) {
  Fixture f(MessageFormat::kRaw, false, 0);
  EXPECT_EQ(Headered(f.m, CloudEventsMode::kBinary),
            (Pairs{{"outbox-id", std::string(f.m.id)}, {"outbox-topic", "orders.created"}}));
}

TEST(MessageFormat, HeaderedUserHeadersNeverForgeIdTopicKeyOrAttributes) {
  Fixture f(MessageFormat::kRaw, false, 0);
  const Header forged[] = {{"outbox-key", "k"},
                           {"Outbox-Key", "k"},
                           {"OUTBOX-ID", "x"},
                           {"outbox-topic", "t"},
                           {"ce-id", "x"},
                           {"ce_type", "x"},
                           {"Content-Type", "x"},
                           {"outbox-\xE2\x84\xAA"
                            "ey",
                            "kelvin"},
                           {"outbox-keys", "kept"}};
  f.m.headers = forged;
  f.m.header_count = sizeof forged / sizeof forged[0];
  EXPECT_EQ(Headered(f.m, CloudEventsMode::kBinary), (Pairs{{"outbox-id", std::string(f.m.id)},
                                                            {"outbox-topic", "orders.created"},
                                                            {"outbox-keys", "kept"}}));
}

TEST(MessageFormat, CloudEventsBinaryHeadersUseTheCeDashPrefixAndTheKeyAsPartitionKey) {
  Fixture f(MessageFormat::kCloudEvents);
  std::string scratch;
  EXPECT_EQ(HeaderedBody(f.m, CloudEventsMode::kBinary, &scratch), R"({"n":1})");
  EXPECT_EQ(Headered(f.m, CloudEventsMode::kBinary),
            (Pairs{{"ce-specversion", "1.0"},
                   {"ce-id", std::string(f.m.id)},
                   {"ce-source", "/outbox/shop"},
                   {"ce-type", "orders.created"},
                   {"ce-time", "2026-11-21T10:00:00.123456Z"},
                   {"content-type", "application/json"},
                   {"ce-partitionkey", "order-7"},
                   {"ce-traceparent", "00-abc-def-01"},
                   {"ce-outboxheaders", R"({"X-Tenant":"acme","id":"user-id"})"}}));
  Fixture unkeyed(MessageFormat::kCloudEvents, false, 0);
  const Pairs bare = Headered(unkeyed.m, CloudEventsMode::kBinary);
  EXPECT_EQ(bare.size(), 6u);
  EXPECT_EQ(bare.back(), (std::pair<std::string, std::string>{"content-type", "application/json"}));
}

TEST(MessageFormat, CloudEventsStructuredBodyIsRedisCloudEventWithNoHeaders) {
  Fixture f(MessageFormat::kCloudEvents);
  std::string scratch;
  EXPECT_EQ(std::string(HeaderedBody(f.m, CloudEventsMode::kStructured, &scratch)), Body(f.m));
  EXPECT_TRUE(Headered(f.m, CloudEventsMode::kStructured).empty());
}

}  // namespace
}  // namespace outbox
