// The MQTT sink's options and topics as tables: every option with good and
// bad values, unknown options named, the rules between options, secrets
// never quoted, client identifiers unique per instance, and which topics a
// route may target.
#include "sinks/mqtt_options.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

SinkOption Num(std::string key, std::string value) {
  return SinkOption{std::move(key), SinkOption::Kind::kNumber, std::move(value)};
}

TEST(MqttOptions, DefaultsWithoutOptions) {
  MqttOptions o;
  ASSERT_EQ(ParseMqttOptions({}, &o), std::nullopt);
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.EffectivePort(), 1883);
  EXPECT_EQ(o.client_id, "outbox");
  EXPECT_FALSE(o.user || o.password);
  EXPECT_FALSE(o.tls);
  EXPECT_TRUE(o.tls_verify);
  EXPECT_EQ(o.protocol, 5);
  EXPECT_EQ(o.qos, 1);
  EXPECT_FALSE(o.retain);
  EXPECT_EQ(o.keepalive_s, 30);
  EXPECT_EQ(o.connect_timeout_ms, 2000);
  EXPECT_EQ(o.ack_timeout_ms, 5000);
  EXPECT_EQ(o.connections, 4);
}

TEST(MqttOptions, EveryOptionTakesItsValues) {
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  MqttOptions o;
  ASSERT_EQ(ParseMqttOptions(
                {Opt("host", "mqtt.example"), Num("port", "8884"), Opt("client_id", "orders-svc.1"),
                 Opt("user", "svc"), Opt("password", "p@ss w0rd!\""), Opt("tls", "true"),
                 Opt("tls_verify", "false"), Opt("tls_ca", pem), Num("keepalive", "60.0"),
                 Opt("protocol", "3.1.1"), Opt("qos", "2"), Opt("retain", "true"),
                 Opt("connect_timeout_ms", "1500"), Num("ack_timeout_ms", "250"),
                 Num("connections", "16")},
                &o),
            std::nullopt);
  EXPECT_EQ(o.host, "mqtt.example");
  EXPECT_EQ(o.EffectivePort(), 8884);
  EXPECT_EQ(o.client_id, "orders-svc.1");
  EXPECT_EQ(o.user, "svc");
  EXPECT_EQ(o.password, "p@ss w0rd!\"");
  EXPECT_TRUE(o.tls);
  EXPECT_FALSE(o.tls_verify);
  EXPECT_EQ(o.tls_ca, pem);
  EXPECT_EQ(o.keepalive_s, 60);
  EXPECT_EQ(o.protocol, 311);
  EXPECT_EQ(o.qos, 2);
  EXPECT_TRUE(o.retain);
  EXPECT_EQ(o.connect_timeout_ms, 1500);
  EXPECT_EQ(o.ack_timeout_ms, 250);
  EXPECT_EQ(o.connections, 16);

  ASSERT_EQ(ParseMqttOptions({Opt("tls", "true"), Num("protocol", "5")}, &o), std::nullopt);
  EXPECT_EQ(o.EffectivePort(), 8883);  // TLS's own port
  EXPECT_EQ(o.protocol, 5);
}

TEST(MqttOptions, BadValuesAreRefusedNamingTheOption) {
  struct Case {
    SinkOptions options;
    std::string named;
  };
  const std::vector<Case> cases = {
      {{Opt("hots", "a")}, "unknown option \"hots\" (valid: host, port"},
      {{Opt("host", "")}, "option \"host\""},
      {{Opt("host", "a b")}, "option \"host\""},
      {{Opt("host", "u@a")}, "option \"host\""},
      {{Opt("host", std::string("a\0b", 3))}, "option \"host\""},
      {{Num("port", "0")}, "option \"port\" must be between 1 and 65535"},
      {{Opt("port", "65536")}, "option \"port\""},
      {{Opt("port", "-1")}, "option \"port\" must be a whole number"},
      {{Num("port", "1.5")}, "option \"port\" must be a whole number"},
      {{Opt("port", "1e3")}, "option \"port\""},
      {{Opt("client_id", "")}, "option \"client_id\""},
      {{Opt("client_id", "a/b")}, "option \"client_id\""},
      {{Opt("client_id", std::string(65, 'a'))}, "option \"client_id\""},
      {{Opt("user", "")}, "option \"user\""},
      {{Opt("user", "a\nb")}, "option \"user\""},
      {{Opt("user", "\xff")}, "option \"user\""},
      {{Opt("password", "")}, "option \"password\""},
      {{Opt("user", "u"), Opt("password", std::string("a\0b", 3))}, "option \"password\""},
      {{Opt("password", "p")}, "option \"password\" needs option \"user\""},
      {{Opt("tls", "yes")}, "option \"tls\" must be \"true\" or \"false\""},
      {{Opt("tls_verify", "false")}, "option \"tls_verify\" applies only with \"tls\""},
      {{Opt("tls", "true"), Opt("tls_ca", "/etc/ssl/certs/ca.pem")}, "option \"tls_ca\""},
      {{Opt("tls_ca", "-----BEGIN CERTIFICATE-----")}, "option \"tls_ca\" applies only with"},
      {{Opt("keepalive", "4")}, "option \"keepalive\" must be between 5 and 65535"},
      {{Opt("protocol", "4")}, "option \"protocol\" must be \"5\" or \"3.1.1\""},
      {{Num("protocol", "3.1")}, "option \"protocol\""},
      {{Opt("qos", "0")}, "option \"qos\" must be between 1 and 2"},
      {{Num("qos", "3")}, "option \"qos\""},
      {{Opt("retain", "1")}, "option \"retain\""},
      {{Num("retain", "1")}, "option \"retain\" must be a JSON string"},
      {{SinkOption{"host", SinkOption::Kind::kOther, ""}}, "option \"host\" must be a JSON string"},
      {{Opt("connect_timeout_ms", "99")}, "option \"connect_timeout_ms\""},
      {{Opt("connect_timeout_ms", "60001")}, "option \"connect_timeout_ms\""},
      {{Opt("ack_timeout_ms", "300001")}, "option \"ack_timeout_ms\""},
      {{Opt("ack_timeout_ms", "9999999999")}, "option \"ack_timeout_ms\""},
      {{Opt("connections", "0")}, "option \"connections\" must be between 1 and 16"},
      {{Num("connections", "17")}, "option \"connections\" must be between 1 and 16"},
      {{Opt("connections", "two")}, "option \"connections\" must be a whole number"},
      {{SinkOption{"password", SinkOption::Kind::kUnresolved, "is not set"}},
       "option \"password\" is not set"},
  };
  for (const Case &c : cases) {
    MqttOptions o;
    o.host = "untouched";
    const std::optional<std::string> error = ParseMqttOptions(c.options, &o);
    ASSERT_TRUE(error.has_value()) << c.named;
    EXPECT_TRUE(Contains(*error, c.named));
    EXPECT_EQ(o.host, "untouched");  // left alone on error
    EXPECT_EQ(ValidateMqttOptions(c.options), error);
  }
}

TEST(MqttOptions, SecretsAreNeverQuoted) {
  const std::string secret = "S3cret-Value-42";
  for (const SinkOptions &options :
       std::vector<SinkOptions>{{Opt("password", secret)},
                                {Opt("user", "u"), Opt("password", secret + std::string(1, '\0'))},
                                {Opt("user", "u"), Opt("password", secret), Opt("qos", secret)}}) {
    const std::optional<std::string> error = ValidateMqttOptions(options);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->find(secret + std::string(1, '\0')), std::string::npos) << *error;
    if (options.size() < 3) {
      EXPECT_EQ(error->find(secret), std::string::npos) << *error;
    }
  }
}

TEST(MqttOptions, TheLastValueOfAnOptionWins) {
  MqttOptions o;
  ASSERT_EQ(ParseMqttOptions({Opt("qos", "2"), Opt("qos", "1")}, &o), std::nullopt);
  EXPECT_EQ(o.qos, 1);
}

TEST(MqttOptions, ClientIdsDifferPerInstance) {
  EXPECT_EQ(MqttClientId("outbox", 0x0123456789abcdefULL), "outbox-0123456789abcdef");
  EXPECT_EQ(MqttClientId("p", 0), "p-0000000000000000");
  EXPECT_NE(MqttClientId("p", 1), MqttClientId("p", 2));
}

TEST(MqttTopics, RouteTargetsArePlainTopicNames) {
  for (const std::string &good : {std::string("orders"), std::string("orders/eu/created"),
                                  std::string("a b/c"), std::string("caf\xc3\xa9/\xe2\x82\xac"),
                                  std::string("x$y"), std::string(kMqttMaxTopicBytes, 'a')}) {
    EXPECT_EQ(CheckMqttTopic(good), std::nullopt) << good;
  }
  struct Bad {
    std::string topic;
    std::string why;
  };
  for (const Bad &bad : std::vector<Bad>{
           {"", "empty"},
           {std::string(kMqttMaxTopicBytes + 1, 'a'), "at most"},
           {"orders/+/eu", "wildcard"},
           {"orders/#", "wildcard"},
           {"a+b", "wildcard"},
           {"$SYS/broker", "'$'"},
           {"/orders", "empty"},
           {"orders/", "empty"},
           {"orders//eu", "empty"},
           {"/", "empty"},
           {std::string("a\0b", 3), "UTF-8"},
           {"a\tb", "UTF-8"},
           {"a\x7f", "UTF-8"},
           {"a\xc2\x85", "UTF-8"},         // U+0085, a C1 control
           {"\xc0\xaf", "UTF-8"},          // overlong '/'
           {"\xed\xa0\x80", "UTF-8"},      // a surrogate
           {"\xef\xbf\xbf", "UTF-8"},      // U+FFFF, a noncharacter
           {"a/\xef\xbb\xbf", "UTF-8"},    // U+FEFF, which paho-mqtt refuses whole packets over
           {"\xf4\x90\x80\x80", "UTF-8"},  // past U+10FFFF
           {"\xe2\x82", "UTF-8"},          // cut short
       }) {
    const std::optional<std::string> why = CheckMqttTopic(bad.topic);
    ASSERT_TRUE(why.has_value()) << bad.topic;
    EXPECT_TRUE(Contains(*why, bad.why)) << bad.topic;
  }
}

// A user property travels only when every subscriber's client can read the
// packet: U+FEFF would make paho-mqtt drop its connection over the message,
// again on every reconnect at QoS 1.
TEST(MqttStrings, TheByteOrderMarkIsRefusedWhereverItStands) {
  EXPECT_TRUE(IsMqttString("note"));
  EXPECT_TRUE(IsMqttString("caf\xc3\xa9 \xe2\x82\xac"));
  EXPECT_FALSE(IsMqttString("\xef\xbb\xbf"));
  EXPECT_FALSE(
      IsMqttString("a\xef\xbb\xbf"
                   "b"));
  EXPECT_FALSE(IsMqttString("note\xef\xbb\xbf"));
}

}  // namespace
}  // namespace outbox
