// The AMQP sink's judgement of the broker's refusals, and what it leaves out
// of a message, as tables: no broker needed.
#include "sinks/amqp_errors.hpp"
#include "sinks/amqp_sink.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace outbox {
namespace {

TEST(AmqpErrors, AChannelCloseRefusesOneMessageTheSinkOrNothing) {
  struct Case {
    uint16_t code;
    const char *text;
    AmqpChannelRefusal refusal;
  };
  const Case cases[] = {
      {406, "PRECONDITION_FAILED - message size 2097152 is larger than configured max size 1048576",
       AmqpChannelRefusal::kMessageTooLarge},
      {406, "PRECONDITION_FAILED - message size 536870913 is larger than max size 536870912",
       AmqpChannelRefusal::kMessageTooLarge},
      // Not a size refusal, or one that does not add up: no message is blamed.
      {406, "PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,\"CC\",longstr}",
       AmqpChannelRefusal::kTransient},
      {406, "PRECONDITION_FAILED - message size 10 is larger than configured max size 20",
       AmqpChannelRefusal::kTransient},
      {406, "PRECONDITION_FAILED - message size is larger than configured max size",
       AmqpChannelRefusal::kTransient},
      {404, "NOT_FOUND - no exchange 'orders' in vhost '/'",
       AmqpChannelRefusal::kSinkConfiguration},
      {403, "ACCESS_REFUSED - access to exchange 'orders' in vhost '/' refused for user 'app'",
       AmqpChannelRefusal::kSinkConfiguration},
      {405, "RESOURCE_LOCKED - cannot obtain exclusive access", AmqpChannelRefusal::kTransient},
      {506, "RESOURCE_ERROR - cannot declare", AmqpChannelRefusal::kTransient},
      {541, "INTERNAL_ERROR", AmqpChannelRefusal::kTransient},
      {320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
       AmqpChannelRefusal::kTransient},
      {999, "", AmqpChannelRefusal::kTransient},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(JudgeAmqpChannelClose(c.code, c.text), c.refusal) << c.code << " " << c.text;
  }
}

TEST(AmqpErrors, SizeRefusalNamesTheMessagesSizeAndTheLimit) {
  const std::optional<AmqpSizeRefusal> r = ParseAmqpSizeRefusal(
      "PRECONDITION_FAILED - message size 1572866 is larger than configured max size 1048576");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->size, 1572866u);
  EXPECT_EQ(r->max, 1048576u);
  EXPECT_FALSE(
      ParseAmqpSizeRefusal("message size 99999999999999999999999 is larger than "
                           "configured max size 1"));
  EXPECT_FALSE(ParseAmqpSizeRefusal(""));
}

TEST(AmqpErrors, ReturnsAreTheTargetsRefusalButForContentTooLarge) {
  EXPECT_EQ(JudgeAmqpReturn(312), DeliveryStatus::kTargetRefused);  // NO_ROUTE
  EXPECT_EQ(JudgeAmqpReturn(313), DeliveryStatus::kTargetRefused);  // NO_CONSUMERS
  EXPECT_EQ(JudgeAmqpReturn(311), DeliveryStatus::kRejected);       // CONTENT_TOO_LARGE
  EXPECT_EQ(JudgeAmqpReturn(0), DeliveryStatus::kTargetRefused);
}

TEST(AmqpErrors, ReplyCodesHaveTheirNames) {
  EXPECT_EQ(AmqpReplyCodeName(312), "NO_ROUTE (312)");
  EXPECT_EQ(AmqpReplyCodeName(404), "NOT_FOUND (404)");
  EXPECT_EQ(AmqpReplyCodeName(320), "CONNECTION_FORCED (320)");
  EXPECT_EQ(AmqpReplyCodeName(777), "reply code 777");
}

TEST(AmqpErrors, HeadersRabbitMqActsOnAreLeftOut) {
  struct Case {
    const char *name;
    bool dropped;
  };
  const Case cases[] = {
      {"CC", true},        {"cc", true},
      {"Cc", true},        {"BCC", true},
      {"bcc", true},       {"x-delay", true},
      {"x-death", true},   {"x-match", true},
      {"x-", true},        {"x-first-death-queue", true},
      {"X-Tenant", false}, {"x", false},
      {"xdelay", false},   {"CCC", false},
      {"C", false},        {"traceparent", false},
      {"", false},         {"bc", false},
  };
  for (const Case &c : cases) EXPECT_EQ(AmqpDropsHeader(c.name), c.dropped) << c.name;
}

TEST(AmqpErrors, TimestampIsUnixSecondsRoundedDown) {
  EXPECT_EQ(AmqpTimestamp(0), 946684800);  // 2000-01-01
  EXPECT_EQ(AmqpTimestamp(848570400123456LL), 1795255200);
  EXPECT_EQ(AmqpTimestamp(-1), 946684799);  // a microsecond before 2000
  EXPECT_EQ(AmqpTimestamp(-1000000), 946684799);
  EXPECT_EQ(AmqpTimestamp(-1000001), 946684798);
}

}  // namespace
}  // namespace outbox
