// The NATS sink's plain judgements as tables: reading JetStream's answers
// (PubAcks, refusals, stream lookups, and whatever else a responder may
// send), which refusal is whose fault, and which headers a message carries.
#include "sinks/nats_headers.hpp"
#include "sinks/nats_replies.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

TEST(NatsReplies, PubAcksAndRefusalsAreRead) {
  JetStreamReply r;
  ASSERT_TRUE(ParseJetStreamReply(R"({"stream":"ORDERS","seq":7})", &r));
  EXPECT_TRUE(IsPubAck(r));
  EXPECT_EQ(r.stream, "ORDERS");
  EXPECT_EQ(r.seq, 7u);
  EXPECT_FALSE(r.duplicate);

  ASSERT_TRUE(ParseJetStreamReply(
      R"( { "stream" : "O", "domain":"hub", "seq" : 18446744, "duplicate" : true } )", &r));
  EXPECT_TRUE(IsPubAck(r));
  EXPECT_TRUE(r.duplicate);

  ASSERT_TRUE(ParseJetStreamReply(R"({"error":{"code":503,"err_code":10077,)"
                                  R"("description":"maximum messages exceeded"},"stream":"L"})",
                                  &r));
  EXPECT_FALSE(IsPubAck(r));
  EXPECT_TRUE(r.has_error);
  EXPECT_EQ(r.code, 503);
  EXPECT_EQ(r.err_code, 10077);
  EXPECT_EQ(r.description, "maximum messages exceeded");
  EXPECT_EQ(JetStreamErrorText(r), "JetStream refused it: maximum messages exceeded (503/10077)");

  ASSERT_TRUE(ParseJetStreamReply(R"({"type":"io.nats.jetstream.api.v1.stream_names_response",)"
                                  R"("total":0,"offset":0,"limit":1024,"streams":null})",
                                  &r));
  EXPECT_EQ(r.total, 0);
  EXPECT_FALSE(IsPubAck(r));
  ASSERT_TRUE(ParseJetStreamReply(R"({"total":2,"streams":["A","B"]})", &r));
  EXPECT_EQ(r.total, 2);

  // Escapes are decoded; unknown members of any shape are skipped.
  ASSERT_TRUE(ParseJetStreamReply(
      R"({"x":[1,{"y":[true,false,null,-1.5e3]}],"error":{"description":"a\"b\u00e9\ud83d\ude00","z":{}}})",
      &r));
  EXPECT_EQ(r.description, "a\"b\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(r.has_error);
}

TEST(NatsReplies, AnythingElseIsNotAnAnswerOrReadsAsNone) {
  JetStreamReply r;
  for (const std::string &text : std::vector<std::string>{
           "", "ok", "[]", "{", R"({"stream":"A")", R"({"stream":"A"} x)", R"({"a":01x})",
           R"({"a":"\x"})", "{\"a\":\"\n\"}", R"({"a":tru})", R"({"a":-})", R"({"a":1.})",
           "{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}", R"({"a":"\u12")"}) {
    EXPECT_FALSE(ParseJetStreamReply(text, &r)) << text;
  }
  // Members of the wrong type count as absent.
  ASSERT_TRUE(ParseJetStreamReply(R"({"stream":7,"seq":"1","duplicate":"yes","total":-1})", &r));
  EXPECT_FALSE(IsPubAck(r));
  EXPECT_FALSE(r.seq.has_value());
  EXPECT_FALSE(r.duplicate);
  EXPECT_FALSE(r.total.has_value());
  ASSERT_TRUE(ParseJetStreamReply(R"({"stream":""})", &r));
  EXPECT_FALSE(IsPubAck(r));  // a stream needs a name
  ASSERT_TRUE(ParseJetStreamReply(R"({"seq":1.5,"total":1e2})", &r));
  EXPECT_FALSE(r.seq.has_value());
  EXPECT_FALSE(r.total.has_value());
}

TEST(NatsReplies, RefusalsAreJudgedByWhoseFaultTheyAre) {
  struct Case {
    int64_t code, err_code;
    std::string description;
    DeliveryStatus want;
  };
  const std::vector<Case> cases = {
      {400, 10054, "message size exceeds maximum allowed", DeliveryStatus::kRejected},
      {400, 10097, "header size exceeds maximum allowed of 64k", DeliveryStatus::kRejected},
      {400, 10060, "expected stream does not match", DeliveryStatus::kRejected},
      {400, 10071, "wrong last sequence: 3", DeliveryStatus::kRejected},
      {400, 10070, "wrong last msg ID: x", DeliveryStatus::kRejected},
      {503, 10063, "expected stream sequence does not match", DeliveryStatus::kRejected},
      {500, 10111, "rollup not permitted", DeliveryStatus::kRejected},
      {503, 10077, "message too large", DeliveryStatus::kRejected},
      {503, 10077, "maximum messages exceeded", DeliveryStatus::kTargetRefused},
      {503, 10077, "maximum bytes exceeded", DeliveryStatus::kTargetRefused},
      {503, 10077, "maximum messages per subject exceeded", DeliveryStatus::kTargetRefused},
      {400, 10109, "invalid operation on sealed stream", DeliveryStatus::kTargetRefused},
      {503, 10077, "store closed", DeliveryStatus::kRetriable},
      {503, 10077, "disk I/O error", DeliveryStatus::kRetriable},
      {503, 10023, "insufficient resources", DeliveryStatus::kRetriable},
      {400, 10002, "resource limits exceeded for account", DeliveryStatus::kRetriable},
      {500, 10047, "insufficient storage resources available", DeliveryStatus::kRetriable},
      {503, 10039, "JetStream not enabled for account", DeliveryStatus::kRetriable},
      {503, 10076, "JetStream not enabled", DeliveryStatus::kRetriable},
      {503, 10008, "JetStream system temporarily unavailable", DeliveryStatus::kRetriable},
      {500, 10118, "stream is offline", DeliveryStatus::kRetriable},
      {400, 99999, "something new", DeliveryStatus::kRetriable},
      {0, 0, "", DeliveryStatus::kRetriable},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(ClassifyJetStreamError(c.code, c.err_code, c.description), c.want)
        << c.err_code << " " << c.description;
  }
}

TEST(NatsHeaders, NamesNatsReadsAndWhatAHeaderCannotCarryAreDropped) {
  struct Case {
    std::string name, value;
    NatsHeaderUse want;
  };
  const std::vector<Case> cases = {
      {"trace", "abc", NatsHeaderUse::kKept},
      {"X-Custom_1.v", "a: b; c=d", NatsHeaderUse::kKept},
      {"empty", "", NatsHeaderUse::kKept},
      {"utf8", "caf\xc3\xa9", NatsHeaderUse::kKept},
      {"tab", "a\tb", NatsHeaderUse::kKept},
      {"Natsy", "v", NatsHeaderUse::kKept},
      {"Nats-Msg-Id", "x", NatsHeaderUse::kMeaningToNats},
      {"nats-msg-id", "x", NatsHeaderUse::kMeaningToNats},
      {"NATS-Expected-Stream", "x", NatsHeaderUse::kMeaningToNats},
      {"Nats-Expected-Last-Sequence", "1", NatsHeaderUse::kMeaningToNats},
      {"Nats-Expected-Last-Subject-Sequence", "1", NatsHeaderUse::kMeaningToNats},
      {"Nats-Expected-Last-Msg-Id", "x", NatsHeaderUse::kMeaningToNats},
      {"Nats-Rollup", "all", NatsHeaderUse::kMeaningToNats},
      {"Nats-", "x", NatsHeaderUse::kMeaningToNats},
      {"Status", "503", NatsHeaderUse::kMeaningToNats},
      {"STATUS", "503", NatsHeaderUse::kMeaningToNats},
      {"description", "x", NatsHeaderUse::kMeaningToNats},
      {"", "x", NatsHeaderUse::kBadName},
      {"a b", "x", NatsHeaderUse::kBadName},
      {"a:b", "x", NatsHeaderUse::kBadName},
      {"caf\xc3\xa9", "x", NatsHeaderUse::kBadName},
      {"a\x7f", "x", NatsHeaderUse::kBadName},
      {"line", "a\r\nNats-Msg-Id: forged", NatsHeaderUse::kBadValue},
      {"cr", "a\rb", NatsHeaderUse::kBadValue},
      {"lf", "a\nb", NatsHeaderUse::kBadValue},
      {"nul", std::string("a\0b", 3), NatsHeaderUse::kBadValue},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(ClassifyNatsHeader(c.name, c.value), c.want) << c.name;
  }
}

OutMessage Message(const Header *headers, size_t count, MessageFormat format, bool has_key,
                   std::string_view key) {
  OutMessage m;
  m.id = "0190f5f0-0000-7000-8000-000000000001";
  m.topic = "orders.created";
  m.target = "orders";
  m.has_key = has_key;
  m.key = key;
  m.payload = R"({"a":1})";
  m.headers = headers;
  m.header_count = count;
  m.headers_json = "{}";
  m.format = format;
  m.created_at = 0;
  m.source = "/src";
  return m;
}

std::vector<std::string> Names(const std::vector<Header> &headers) {
  std::vector<std::string> names;
  for (const Header &h : headers) names.emplace_back(h.name);
  return names;
}

TEST(NatsHeaders, EachMessageCarriesItsIdAndOutboxsHeaders) {
  const Header user[] = {{"trace", "t"},
                         {"Nats-Msg-Id", "forged"},
                         {"bad:name", "x"},
                         {"status", "503"},
                         {"multi", "a\nb"}};
  std::string scratch;
  std::vector<Header> out;
  OutMessage raw = Message(user, 5, MessageFormat::kRaw, true, "k");
  ASSERT_EQ(NatsHeaders(raw, &scratch, &out), std::nullopt);
  EXPECT_EQ(Names(out), (std::vector<std::string>{"Nats-Msg-Id", "outbox-id", "outbox-topic",
                                                  "outbox-key", "trace"}));
  EXPECT_EQ(out[0].value, raw.id);

  OutMessage ce = Message(user, 5, MessageFormat::kCloudEvents, true, "k");
  ASSERT_EQ(NatsHeaders(ce, &scratch, &out), std::nullopt);
  EXPECT_EQ(Names(out),
            (std::vector<std::string>{"Nats-Msg-Id", "ce-specversion", "ce-id", "ce-source",
                                      "ce-type", "ce-time", "content-type", "ce-partitionkey",
                                      "ce-trace", "ce-status", "ce-outboxheaders"}))
      << "(ce-multi, an extension attribute whose value holds a line break, is left out)";
}

TEST(NatsHeaders, AKeyThatCannotTravelRefusesTheMessage) {
  std::string scratch;
  std::vector<Header> out;
  for (MessageFormat format : {MessageFormat::kRaw, MessageFormat::kCloudEvents}) {
    const OutMessage m = Message(nullptr, 0, format, true, "two\nlines");
    const std::optional<std::string> why = NatsHeaders(m, &scratch, &out);
    ASSERT_TRUE(why.has_value());
    EXPECT_TRUE(Contains(*why, "cannot travel in a NATS header"));
  }
}

}  // namespace
}  // namespace outbox
