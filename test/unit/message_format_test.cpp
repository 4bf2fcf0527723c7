// Message layouts per route format: what consumers of each convention read.
#include "message_format.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "sink.hpp"

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

TEST(MessageFormat, NamesParseAndNothingElse) {
  EXPECT_EQ(ParseMessageFormat("raw"), MessageFormat::kRaw);
  EXPECT_EQ(ParseMessageFormat("cloudevents"), MessageFormat::kCloudEvents);
  EXPECT_EQ(ParseMessageFormat("debezium"), MessageFormat::kDebezium);
  for (const char *bad : {"", "RAW", "json", "cloudevents ", "debezium\n", "avro"}) {
    EXPECT_FALSE(ParseMessageFormat(bad).has_value()) << bad;
  }
  for (MessageFormat f :
       {MessageFormat::kRaw, MessageFormat::kCloudEvents, MessageFormat::kDebezium}) {
    EXPECT_EQ(ParseMessageFormat(MessageFormatName(f)), f);
  }
}

TEST(MessageFormat, RawKafkaHeadersAreTheContractsThenTheUsers) {
  Fixture f(MessageFormat::kRaw);
  std::string scratch;
  std::vector<Header> headers;
  KafkaHeaders(f.m, &scratch, &headers);
  EXPECT_EQ(Flatten(headers), (Pairs{{"outbox-id", std::string(f.m.id)},
                                     {"outbox-topic", "orders.created"},
                                     {"traceparent", "00-abc-def-01"},
                                     {"X-Tenant", "acme"},
                                     {"id", "user-id"}}));
}

TEST(MessageFormat, CloudEventsKafkaUsesBinaryModeHeaders) {
  Fixture f(MessageFormat::kCloudEvents);
  std::string scratch;
  std::vector<Header> headers;
  KafkaHeaders(f.m, &scratch, &headers);
  EXPECT_EQ(Flatten(headers), (Pairs{{"ce_specversion", "1.0"},
                                     {"ce_id", std::string(f.m.id)},
                                     {"ce_source", "/outbox/shop"},
                                     {"ce_type", "orders.created"},
                                     {"ce_time", "2026-11-21T10:00:00.123456Z"},
                                     {"content-type", "application/json"},
                                     {"traceparent", "00-abc-def-01"},
                                     {"X-Tenant", "acme"},
                                     {"id", "user-id"}}));
}

TEST(MessageFormat, DebeziumKafkaCarriesTheIdHeader) {
  Fixture f(MessageFormat::kDebezium, true, 0);
  std::string scratch;
  std::vector<Header> headers;
  KafkaHeaders(f.m, &scratch, &headers);
  EXPECT_EQ(Flatten(headers), (Pairs{{"id", std::string(f.m.id)}}));
}

// Issue 14, finding 8: a user header never stands in for one outbox sets (a
// consumer reading the last header of a name, or folding case, would take
// the caller's event id, type or source).
TEST(MessageFormat, UserHeadersNeverForgeOurs) {
  Header forged[] = {{"outbox-id", "forged"},     {"OUTBOX-TOPIC", "forged"}, {"ce_id", "forged"},
                     {"Ce_Source", "forged"},     {"ce_type", "forged"},      {"content-type", "x"},
                     {"Content-Type", "x"},       {"ce_specversion", "0.3"},  {"ce_time", "x"},
                     {"ce_datacontenttype", "x"}, {"id", "forged"},           {"kept", "yes"}};
  const std::vector<std::pair<MessageFormat, std::vector<std::string>>> ours = {
      {MessageFormat::kRaw, {"outbox-id", "outbox-topic"}},
      {MessageFormat::kCloudEvents,
       {"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "content-type"}},
      {MessageFormat::kDebezium, {"id"}}};
  for (const auto &[format, names] : ours) {
    Fixture f(format, true, 0);
    f.m.headers = forged;
    f.m.header_count = sizeof forged / sizeof forged[0];
    std::string scratch;
    std::vector<Header> headers;
    KafkaHeaders(f.m, &scratch, &headers);
    std::vector<std::string> seen;
    for (const Header &h : headers) {
      std::string lower(h.name);
      for (char &c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (std::find(names.begin(), names.end(), lower) == names.end()) continue;
      seen.push_back(lower);
      EXPECT_NE(h.value, "forged") << MessageFormatName(format) << " " << h.name;
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end()) << MessageFormatName(format);
    EXPECT_EQ(seen.size(), names.size()) << MessageFormatName(format);
    for (const Header &h : headers) {
      if (format == MessageFormat::kCloudEvents) {
        EXPECT_NE(h.name, "ce_datacontenttype");
      }
    }
    EXPECT_EQ(headers.back().name, "kept") << MessageFormatName(format);
  }
  // Names outbox does not set in a format pass: raw has no "id" header.
  Fixture raw(MessageFormat::kRaw);
  std::string scratch;
  std::vector<Header> headers;
  KafkaHeaders(raw.m, &scratch, &headers);
  EXPECT_EQ(headers.back().name, "id");
}

// Consumers that fold case beyond ASCII (Java's equalsIgnoreCase, Go's
// strings.ToLower) read these names as ours: U+0130 and U+0131 fold to 'i',
// U+017F to 's', the Kelvin sign U+212A to 'k'.
TEST(MessageFormat, UnicodeNamesThatFoldToOursAreNotSent) {
  const std::vector<std::pair<MessageFormat, std::vector<std::string>>> cases = {
      {MessageFormat::kRaw, {"outbox-İd", "OUTBOX-TOPıC"}},
      {MessageFormat::kCloudEvents, {"ce_ıd", "ce_ſource", "ce_partitionKey", "ce_tİme"}},
      {MessageFormat::kDebezium, {"İD", "ıd"}}};
  for (const auto &[format, names] : cases) {
    std::vector<Header> user;
    for (const std::string &n : names) user.push_back({n, "forged"});
    user.push_back({"kept", "yes"});
    Fixture f(format, true, 0);
    f.m.headers = user.data();
    f.m.header_count = user.size();
    std::string scratch;
    std::vector<Header> headers;
    KafkaHeaders(f.m, &scratch, &headers);
    for (const Header &h : headers) {
      EXPECT_NE(h.value, "forged") << MessageFormatName(format) << " " << h.name;
    }
    EXPECT_EQ(headers.back().name, "kept") << MessageFormatName(format);
  }
  // Other non-ASCII names are the user's.
  Header other[] = {{"outbox-ïd", "mine"}};
  Fixture f(MessageFormat::kRaw, true, 0);
  f.m.headers = other;
  f.m.header_count = 1;
  std::string scratch;
  std::vector<Header> headers;
  KafkaHeaders(f.m, &scratch, &headers);
  EXPECT_EQ(headers.back().value, "mine");
}

TEST(MessageFormat, RawRedisStreamFieldsAndEnvelope) {
  Fixture f(MessageFormat::kRaw, false, 0);
  std::string scratch;
  std::vector<std::string_view> fields;
  RedisStreamFields(f.m, &scratch, &fields);
  EXPECT_EQ(std::vector<std::string>(fields.begin(), fields.end()),
            (std::vector<std::string>{"id", std::string(f.m.id), "topic", "orders.created", "key",
                                      "", "payload", R"({"n":1})", "headers", "{}"}));
  std::string body;
  AppendRedisBody(f.m, &body);
  EXPECT_EQ(body, "{\"id\":\"" + std::string(f.m.id) +
                      R"(","topic":"orders.created","key":null,"payload":{"n":1},"headers":{}})");
}

TEST(MessageFormat, CloudEventsRedisIsStructuredJson) {
  Fixture f(MessageFormat::kCloudEvents);
  std::string body;
  AppendRedisBody(f.m, &body);
  // Valid attribute names become attributes; "X-Tenant" cannot, and "id"
  // is the event's own id: both stay, in outboxheaders.
  EXPECT_EQ(body,
            "{\"specversion\":\"1.0\",\"id\":\"" + std::string(f.m.id) +
                R"(","source":"/outbox/shop","type":"orders.created",)"
                R"("time":"2026-11-21T10:00:00.123456Z","datacontenttype":"application/json",)"
                R"("partitionkey":"order-7","traceparent":"00-abc-def-01",)"
                R"("outboxheaders":"{\"X-Tenant\":\"acme\",\"id\":\"user-id\"}",)"
                R"("data":{"n":1}})");
  std::string scratch;
  std::vector<std::string_view> fields;
  RedisStreamFields(f.m, &scratch, &fields);
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[0], "cloudevent");
  EXPECT_EQ(std::string(fields[1]), body);
}

TEST(MessageFormat, CloudEventsWithoutKeyHasNoPartitionKey) {
  Fixture f(MessageFormat::kCloudEvents, false, 0);
  std::string body;
  AppendRedisBody(f.m, &body);
  EXPECT_EQ(body.find("partitionkey"), std::string::npos);
  EXPECT_EQ(body.find("outboxheaders"), std::string::npos);
}

TEST(MessageFormat, DebeziumRedisFollowsDebeziumServer) {
  Fixture keyed(MessageFormat::kDebezium);
  std::string scratch;
  std::vector<std::string_view> fields;
  RedisStreamFields(keyed.m, &scratch, &fields);
  EXPECT_EQ(std::vector<std::string>(fields.begin(), fields.end()),
            (std::vector<std::string>{"order-7", R"({"n":1})"}));
  Fixture keyless(MessageFormat::kDebezium, false);
  RedisStreamFields(keyless.m, &scratch, &fields);
  EXPECT_EQ(std::vector<std::string>(fields.begin(), fields.end()),
            (std::vector<std::string>{"default", R"({"n":1})"}));
  std::string body;
  AppendRedisBody(keyed.m, &body);
  EXPECT_EQ(body, R"({"n":1})");
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

TEST(MessageFormat, AttributeNamesAreLowercaseAlphanumeric) {
  EXPECT_TRUE(IsCloudEventsAttributeName("traceparent"));
  EXPECT_TRUE(IsCloudEventsAttributeName("x1"));
  for (const char *bad : {"", "X", "trace-parent", "a_b", "é", "a b"}) {
    EXPECT_FALSE(IsCloudEventsAttributeName(bad)) << bad;
  }
}

}  // namespace
}  // namespace outbox
