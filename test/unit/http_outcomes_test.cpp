// How the HTTP sink judges answers, as tables: status codes, Retry-After,
// quoted responses, and when an endpoint is down or one event is refused.
#include "sinks/http_outcomes.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox {
namespace {

TEST(HttpOutcomes, StatusCodesAreDeliveredTransientOrTheEventsFault) {
  for (long s : {200L, 201L, 202L, 204L, 299L}) {
    EXPECT_EQ(ClassifyHttpStatus(s), HttpAnswer::kDelivered) << s;
  }
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L, 599L, 301L, 302L, 307L, 0L}) {
    EXPECT_EQ(ClassifyHttpStatus(s), HttpAnswer::kTransient) << s;
  }
  for (long s : {400L, 401L, 403L, 404L, 405L, 409L, 410L, 413L, 415L, 422L, 451L, 100L, 600L}) {
    EXPECT_EQ(ClassifyHttpStatus(s), HttpAnswer::kEventFault) << s;
  }
}

TEST(HttpOutcomes, RetryAfterIsSecondsOrAnHttpDate) {
  EXPECT_EQ(ParseRetryAfter(" 120\r\n", 0), 120000);
  EXPECT_EQ(ParseRetryAfter("0", 0), 0);
  // 1994-11-06 08:49:37 UTC is 784111777 (python3: calendar.timegm).
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 - 30), 30000);
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 + 30), 0);  // passed
  EXPECT_EQ(ParseRetryAfter("Thu, 01 Jan 1970 00:00:10 GMT", 0), 10000);
  for (const char *bad : {"", "-1", "1.5", "soon", "Sun, 06 Nov 1994 08:49:37 UTC",
                          "Sun, 06 Foo 1994 08:49:37 GMT", "9999999999999"}) {
    EXPECT_FALSE(ParseRetryAfter(bad, 0)) << bad;
  }
}

TEST(HttpOutcomes, AtMost256BytesOfAResponseAreQuotedPrintable) {
  EXPECT_EQ(QuotedResponse("no\r\nway\x01\xc3\xa9"), "no??way???");
  EXPECT_EQ(QuotedResponse(std::string(1000, 'x')).size(), kHttpMaxQuotedResponse);
}

TEST(HttpEndpointsTest, AFailureWhileOthersToTheEndpointSucceedIsTheEvents) {
  HttpEndpoints e;
  e.Delivered("http://h/a");
  e.Failed("http://h/a", "X");
  EXPECT_FALSE(e.Down("http://h/a", true, false));
  e.Failed("http://h/a", "X");  // X alone again: still its own
  EXPECT_FALSE(e.Down("http://h/a", false, false));
}

TEST(HttpEndpointsTest, FailuresOfDifferentEventsMakeTheEndpointDownUntilA2xx) {
  HttpEndpoints e;
  e.Delivered("http://h/a");
  e.Delivered("http://h/b");
  e.Failed("http://h/a", "X");
  EXPECT_FALSE(e.Down("http://h/a", false, false));
  e.Failed("http://h/a", "Y");
  EXPECT_TRUE(e.Down("http://h/a", false, false));
  e.Failed("http://h/a", "X");
  EXPECT_TRUE(e.Down("http://h/a", false, false));
  e.Failed("http://h/b", "Z");  // another endpoint: judged on its own
  EXPECT_FALSE(e.Down("http://h/b", false, false));
  EXPECT_FALSE(e.Down("http://h/a", true, false));  // a 2xx in the same call: the events'
  e.Delivered("http://h/a");
  e.Failed("http://h/a", "X");
  EXPECT_FALSE(e.Down("http://h/a", false, false));
}

TEST(HttpEndpointsTest, TwoEventsFailingInOneCallMakeItDownInEitherOrder) {
  HttpEndpoints e;
  e.Delivered("http://h/a");
  e.Failed("http://h/a", "X");
  e.Failed("http://h/a", "Y");
  EXPECT_TRUE(e.Down("http://h/a", false, false));
}

TEST(HttpEndpointsTest, OneEventFailingAloneAtANewEndpointIsTheEvents) {
  HttpEndpoints e;
  e.Failed("http://h/a", "X");
  EXPECT_FALSE(e.Down("http://h/a", false, false));  // never took anything, yet X alone
  e.Failed("http://h/a", "X");
  EXPECT_FALSE(e.Down("http://h/a", false, false));
  e.Failed("http://h/a", "Y");  // a second event fails there too
  EXPECT_TRUE(e.Down("http://h/a", false, false));
}

TEST(HttpEndpointsTest, AnUnreachableOrPacingEndpointIsDownWhateverOthersGot) {
  HttpEndpoints e;
  e.Failed("http://h/a", "X");
  EXPECT_TRUE(e.Down("http://h/a", false, true));  // connection refused, never answered
  e.Delivered("http://h/a");
  e.Failed("http://h/a", "X");
  EXPECT_TRUE(e.Down("http://h/a", false, true));
  // 429 or Retry-After while other events got a 2xx in the same call: a
  // rate limit letting some through, not this event's fault.
  EXPECT_TRUE(e.Down("http://h/a", true, true));
}

// An emit() role that sends to thousands of targets that answer cannot make
// the sink forget an endpoint it judged down (whose events then spent
// attempts as if each failure were their own).
TEST(HttpEndpointsTest, ManyEndpointsThatAnswerNeverPushADownEndpointOut) {
  HttpEndpoints e;
  e.Failed("http://h/down", "X");
  e.Failed("http://h/down", "Y");
  ASSERT_TRUE(e.Down("http://h/down", false, false));
  for (size_t i = 0; i < 3 * HttpEndpoints::kMaxEndpoints; ++i) {
    e.Delivered("http://h/t" + std::to_string(i));
  }
  EXPECT_TRUE(e.Down("http://h/down", false, false));
  // Nor endpoints that failed once each: they go before a down one does.
  for (size_t i = 0; i < 2 * HttpEndpoints::kMaxEndpoints; ++i) {
    e.Failed("http://h/once" + std::to_string(i), "Z");
  }
  EXPECT_TRUE(e.Down("http://h/down", false, false));
}

}  // namespace
}  // namespace outbox
