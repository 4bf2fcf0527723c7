// The AMQP sink's options (what create_sink() accepts, and the message that
// names the option it refuses) and its rule for routing keys, as tables.
#include "sinks/amqp_options.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace outbox {
namespace {

using test_support::Contains;
using Kind = SinkOption::Kind;

SinkOption Str(std::string key, std::string value) {
  return {std::move(key), Kind::kString, std::move(value)};
}
SinkOption Num(std::string key, std::string value) {
  return {std::move(key), Kind::kNumber, std::move(value)};
}
SinkOption Other(std::string key) { return {std::move(key), Kind::kOther, ""}; }

const char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

TEST(AmqpOptions, DefaultsWithoutOptions) {
  AmqpOptions o;
  ASSERT_EQ(ParseAmqpOptions({}, &o), std::nullopt);
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.EffectivePort(), 5672);
  EXPECT_EQ(o.vhost, "/");
  EXPECT_EQ(o.user, "guest");
  EXPECT_EQ(o.password, "guest");
  EXPECT_EQ(o.exchange, "");
  EXPECT_FALSE(o.tls);
  EXPECT_TRUE(o.tls_verify);
  EXPECT_EQ(o.heartbeat_s, 30);
  EXPECT_EQ(o.connect_timeout_ms, 5000);
  EXPECT_EQ(o.delivery_timeout_ms, 10000);
}

TEST(AmqpOptions, EveryOptionIsRead) {
  AmqpOptions o;
  const SinkOptions options = {Str("host", "rabbit.internal"),
                               Num("port", "5673.0"),
                               Str("vhost", "shop"),
                               Str("user", "outbox"),
                               Str("password", "s3cret"),
                               Str("exchange", "events"),
                               Str("tls", "true"),
                               Str("tls_verify", "false"),
                               Str("tls_ca", kPem),
                               Str("heartbeat", "0"),
                               Num("connect_timeout_ms", "250"),
                               Str("delivery_timeout_ms", "60000")};
  ASSERT_EQ(ParseAmqpOptions(options, &o), std::nullopt);
  EXPECT_EQ(o.host, "rabbit.internal");
  EXPECT_EQ(o.EffectivePort(), 5673);
  EXPECT_EQ(o.vhost, "shop");
  EXPECT_EQ(o.user, "outbox");
  EXPECT_EQ(o.password, "s3cret");
  EXPECT_EQ(o.exchange, "events");
  EXPECT_TRUE(o.tls);
  EXPECT_FALSE(o.tls_verify);
  EXPECT_EQ(o.tls_ca, kPem);
  EXPECT_EQ(o.heartbeat_s, 0);
  EXPECT_EQ(o.connect_timeout_ms, 250);
  EXPECT_EQ(o.delivery_timeout_ms, 60000);
  // TLS's default port, when none is given.
  ASSERT_EQ(ParseAmqpOptions({Str("tls", "true")}, &o), std::nullopt);
  EXPECT_EQ(o.EffectivePort(), 5671);
  // The last value of a key wins; an empty exchange is the default one.
  ASSERT_EQ(ParseAmqpOptions({Str("exchange", "a"), Str("exchange", "")}, &o), std::nullopt);
  EXPECT_EQ(o.exchange, "");
}

// Each refused option, and the text that must name it.
TEST(AmqpOptions, BadValuesAreRefusedNamingTheOption) {
  struct Case {
    SinkOptions options;
    const char *says;
  };
  const std::string long_name(256, 'n');
  const std::vector<Case> cases = {
      {{Str("hostname", "x")}, "unknown option \"hostname\" (valid: host, port, vhost, user"},
      {{Str("ssl", "true")}, "unknown option \"ssl\""},
      {{Str("tls_cert", kPem)}, "unknown option \"tls_cert\""},
      {{Str("host", "")}, "option \"host\" must be 1 to 255 bytes"},
      {{Str("host", std::string(256, 'h'))}, "option \"host\" must be 1 to 255 bytes"},
      {{Str("host", "a\nb")}, "option \"host\" must be 1 to 255 bytes without control"},
      {{Num("host", "1")}, "option \"host\" must be a JSON string"},
      {{Other("host")}, "option \"host\" must be a JSON string"},
      {{Str("port", "0")}, "option \"port\" must be between 1 and 65535"},
      {{Num("port", "65536")}, "option \"port\" must be between 1 and 65535"},
      {{Str("port", "56x")}, "option \"port\" must be an integer, not \"56x\""},
      {{Num("port", "5672.5")}, "option \"port\" must be an integer"},
      {{Str("port", "+5672")}, "option \"port\" must be an integer"},
      {{Str("port", " 5672")}, "option \"port\" must be an integer"},
      {{Str("port", "99999999999999999999")}, "option \"port\" must be an integer"},
      {{Other("port")}, "option \"port\" must be a JSON string or number"},
      {{Str("vhost", "")}, "option \"vhost\" must be 1 to 255 bytes"},
      {{Str("vhost", long_name)}, "option \"vhost\" must be 1 to 255 bytes"},
      {{Str("user", "")}, "option \"user\" must be non-empty"},
      {{Str("user", std::string("a\0b", 3))}, "option \"user\" must be non-empty, without control"},
      {{Num("user", "7")}, "option \"user\" must be a JSON string"},
      {{Str("password", std::string("a\0b", 3))}, "option \"password\" must not hold a NUL byte"},
      {{Other("password")}, "option \"password\" must be a JSON string"},
      {{Str("exchange", long_name)}, "option \"exchange\" must be at most 255 bytes"},
      {{Str("exchange", "a\tb")}, "option \"exchange\" must be at most 255 bytes without control"},
      {{Str("tls", "yes")}, "option \"tls\" must be \"true\" or \"false\", not \"yes\""},
      {{Other("tls")}, "option \"tls\" must be a JSON string (\"true\" or \"false\")"},
      {{Str("tls", "true"), Str("tls_verify", "1")},
       "option \"tls_verify\" must be \"true\" or \"false\""},
      {{Str("tls_verify", "false")}, "option \"tls_verify\" applies only with \"tls\": \"true\""},
      {{Str("tls_ca", kPem)}, "option \"tls_ca\" applies only with \"tls\": \"true\""},
      {{Str("tls_ca", kPem), Str("tls", "false")}, "option \"tls_ca\" applies only with"},
      {{Str("tls", "true"), Str("tls_ca", "/etc/ssl/certs/ca.pem")},
       "option \"tls_ca\" must be the PEM text of one or more certificates"},
      {{Str("heartbeat", "-1")}, "option \"heartbeat\" must be between 0 and 65535"},
      {{Num("heartbeat", "65536")}, "option \"heartbeat\" must be between 0 and 65535"},
      {{Str("connect_timeout_ms", "99")},
       "option \"connect_timeout_ms\" must be between 100 and 300000"},
      {{Num("connect_timeout_ms", "300001")}, "option \"connect_timeout_ms\" must be between"},
      {{Str("delivery_timeout_ms", "0")},
       "option \"delivery_timeout_ms\" must be between 100 and 3600000"},
      {{Num("delivery_timeout_ms", "3600001")}, "option \"delivery_timeout_ms\" must be between"},
      {{SinkOption{"password", Kind::kUnresolved,
                   "names environment variable OUTBOX_X, which the server's environment lacks"}},
       "option \"password\" names environment variable OUTBOX_X"},
  };
  for (const Case &c : cases) {
    AmqpOptions untouched;
    untouched.host = "untouched";
    AmqpOptions o = untouched;
    const std::optional<std::string> error = ParseAmqpOptions(c.options, &o);
    ASSERT_TRUE(error.has_value()) << c.says;
    EXPECT_TRUE(Contains(*error, c.says));
    EXPECT_EQ(o.host, "untouched") << "*out is left alone on error: " << c.says;
    EXPECT_EQ(ValidateAmqpOptions(c.options), error);
  }
}

TEST(AmqpOptions, SecretsAreNeverQuotedInErrors) {
  const std::string secret = "pa55-with-control\x01-char";
  const std::optional<std::string> error = ParseAmqpOptions({Str("password", secret)}, nullptr);
  EXPECT_EQ(error, std::nullopt) << "any byte but NUL is a password";
  const std::optional<std::string> nul =
      ParseAmqpOptions({Str("password", std::string("s3cret\0x", 8))}, nullptr);
  ASSERT_TRUE(nul.has_value());
  EXPECT_EQ(nul->find("s3cret"), std::string::npos);
}

TEST(AmqpOptions, RoutingKeysUpTo255Bytes) {
  EXPECT_EQ(CheckAmqpRoutingKey(""), std::nullopt);  // a fanout exchange ignores it
  EXPECT_EQ(CheckAmqpRoutingKey("orders.created"), std::nullopt);
  EXPECT_EQ(CheckAmqpRoutingKey("a b/c#*"), std::nullopt);
  EXPECT_EQ(CheckAmqpRoutingKey(std::string(255, 'k')), std::nullopt);
  const std::optional<std::string> why = CheckAmqpRoutingKey(std::string(256, 'k'));
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, "An AMQP routing key is at most 255 bytes.");
}

}  // namespace
}  // namespace outbox
