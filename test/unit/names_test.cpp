// The rules for user-given names: Kafka topics, route patterns, sink names.
#include "core/names.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace outbox {
namespace {

using namespace std::string_literals;

constexpr std::string_view kAllTopicChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";

bool IsAllowedTopicByte(unsigned char c) {
  return kAllTopicChars.find(static_cast<char>(c)) != std::string_view::npos;
}

TEST(Names, TopicMayUseLettersDigitsDotUnderscoreAndDash) {
  EXPECT_TRUE(IsValidTopic("orders"));
  EXPECT_TRUE(IsValidTopic("Orders.Created_v2-eu"));
  EXPECT_TRUE(IsValidTopic("a"));
  EXPECT_TRUE(IsValidTopic("."));
  EXPECT_TRUE(IsValidTopic("0"));
  EXPECT_TRUE(IsValidTopic(kAllTopicChars));
}

TEST(Names, TopicLengthIs1To249Characters) {
  EXPECT_FALSE(IsValidTopic(""));
  EXPECT_TRUE(IsValidTopic(std::string(249, 'x')));
  EXPECT_FALSE(IsValidTopic(std::string(250, 'x')));
  EXPECT_FALSE(IsValidTopic(std::string(10000, 'x')));
  EXPECT_EQ(kMaxTopicLength, 249u);
}

TEST(Names, TopicRejectsCharactersKafkaRejects) {
  for (const char *bad :
       {"orders created", " orders", "orders ", "orders/created", "orders*", "*", "\"orders\"",
        "'orders'", "orders:1", "orders\\x", "orders\n", "orders\t", "caf\xc3\xa9", "\xe2\x82\xac",
        "orders,x", "orders@x", "orders#x", "orders+x"}) {
    EXPECT_FALSE(IsValidTopic(bad)) << '"' << bad << '"';
  }
}

TEST(Names, TopicWithEmbeddedNulIsRejected) {
  // A string_view can carry a NUL that a C string would silently cut off.
  EXPECT_FALSE(IsValidTopic("orders\0evil"s));
  EXPECT_FALSE(IsValidTopic("\0"s));
  EXPECT_FALSE(IsValidTopic("orders\0"s));
}

TEST(Names, TopicAcceptsExactlyTheKafkaCharacterSet) {
  for (int c = 0; c < 256; ++c) {
    const std::string topic = "t" + std::string(1, static_cast<char>(c)) + "t";
    EXPECT_EQ(IsValidTopic(topic), IsAllowedTopicByte(static_cast<unsigned char>(c)))
        << "byte " << c;
  }
}

TEST(Names, PatternAllowsStarsAnywhere) {
  EXPECT_TRUE(IsValidPattern("*"));
  EXPECT_TRUE(IsValidPattern("orders.*"));
  EXPECT_TRUE(IsValidPattern("*.created"));
  EXPECT_TRUE(IsValidPattern("a*b*c"));
  EXPECT_TRUE(IsValidPattern("**"));
  EXPECT_TRUE(IsValidPattern("orders.created"));  // exact patterns too
}

TEST(Names, PatternOtherwiseFollowsTheTopicRules) {
  EXPECT_FALSE(IsValidPattern(""));
  EXPECT_TRUE(IsValidPattern(std::string(249, '*')));
  EXPECT_FALSE(IsValidPattern(std::string(250, '*')));
  EXPECT_FALSE(IsValidPattern(std::string(248, 'a') + "**"));
  for (const char *bad :
       {"orders *", "orders/*", "orders.?", "orders.[ab]", "caf\xc3\xa9*", "\"*\"", "orders.%"}) {
    EXPECT_FALSE(IsValidPattern(bad)) << '"' << bad << '"';
  }
  EXPECT_FALSE(IsValidPattern("*\0*"s));
  for (int c = 0; c < 256; ++c) {
    const std::string pattern = "p" + std::string(1, static_cast<char>(c)) + "p";
    EXPECT_EQ(IsValidPattern(pattern),
              c == '*' || IsAllowedTopicByte(static_cast<unsigned char>(c)))
        << "byte " << c;
  }
}

TEST(Names, SinkNameIs1To63TopicCharacters) {
  EXPECT_TRUE(IsValidSinkName("kafka_main"));
  EXPECT_TRUE(IsValidSinkName("redis-eu.1"));
  EXPECT_TRUE(IsValidSinkName("k"));
  EXPECT_TRUE(IsValidSinkName(std::string(63, 's')));
  EXPECT_FALSE(IsValidSinkName(std::string(64, 's')));
  EXPECT_FALSE(IsValidSinkName(""));
  EXPECT_EQ(kMaxSinkNameLength, 63u);
}

TEST(Names, SinkNameRejectsStarsSpacesAndQuotes) {
  for (const char *bad :
       {"my sink", "sink*", "*", "\"sink\"", "sink;drop", "sink/x", "s\xc3\xa9"}) {
    EXPECT_FALSE(IsValidSinkName(bad)) << '"' << bad << '"';
  }
  EXPECT_FALSE(IsValidSinkName("sink\0x"s));
}

}  // namespace
}  // namespace outbox
