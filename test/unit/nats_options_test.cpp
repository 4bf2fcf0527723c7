// The NATS sink's options and route subjects as tables: every option with
// good and bad values, unknown options named, the rules between options,
// secrets never quoted, and which subjects a route may target.
#include "sinks/nats_options.hpp"
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
SinkOption Other(std::string key) {
  return SinkOption{std::move(key), SinkOption::Kind::kOther, ""};
}

TEST(NatsOptions, DefaultsWithoutOptions) {
  NatsOptions o;
  ASSERT_EQ(ParseNatsOptions({}, &o), std::nullopt);
  ASSERT_EQ(o.servers.size(), 1u);
  EXPECT_EQ(NatsServerUrl(o.servers[0]), "nats://127.0.0.1:4222");
  EXPECT_FALSE(o.user || o.password || o.token || o.tls_hostname);
  EXPECT_FALSE(o.tls);
  EXPECT_EQ(o.connect_timeout_ms, 2000);
  EXPECT_EQ(o.ack_timeout_ms, 5000);
}

TEST(NatsOptions, EveryOptionTakesItsValues) {
  NatsOptions o;
  ASSERT_EQ(
      ParseNatsOptions({Opt("servers", " nats://a.example:4001, tls://a.example ,a.example:7"),
                        Opt("user", "svc"), Opt("password", "p@ss w0rd!"),
                        Opt("tls_hostname", "nats.example.com"), Num("connect_timeout_ms", "1500"),
                        Opt("ack_timeout_ms", "250")},
                       &o),
      std::nullopt);
  ASSERT_EQ(o.servers.size(), 3u);
  EXPECT_EQ(NatsServerUrl(o.servers[0]), "nats://a.example:4001");
  EXPECT_EQ(NatsServerUrl(o.servers[1]), "nats://a.example:4222");
  EXPECT_EQ(NatsServerUrl(o.servers[2]), "nats://a.example:7");
  EXPECT_TRUE(o.tls);  // a tls:// server asks for TLS
  EXPECT_EQ(o.tls_hostname, "nats.example.com");
  EXPECT_EQ(o.user, "svc");
  EXPECT_EQ(o.password, "p@ss w0rd!");
  EXPECT_EQ(o.connect_timeout_ms, 1500);
  EXPECT_EQ(o.ack_timeout_ms, 250);

  ASSERT_EQ(ParseNatsOptions({Opt("servers", "[::1]:4333"), Opt("token", "tok"),
                              Num("ack_timeout_ms", "300000.0")},
                             &o),
            std::nullopt);
  EXPECT_EQ(NatsServerUrl(o.servers[0]), "nats://[::1]:4333");
  EXPECT_EQ(o.token, "tok");
  EXPECT_EQ(o.ack_timeout_ms, 300000);
  EXPECT_FALSE(o.tls);

  // TLS on a host name: that name is the one the certificate must hold.
  ASSERT_EQ(ParseNatsOptions({Opt("servers", "nats.internal:4222"), Opt("tls", "true")}, &o),
            std::nullopt);
  EXPECT_TRUE(o.tls);
  EXPECT_EQ(o.tls_hostname, "nats.internal");
  ASSERT_EQ(ParseNatsOptions({Opt("tls", "false")}, &o), std::nullopt);
  EXPECT_FALSE(o.tls);
}

struct BadCase {
  SinkOptions options;
  std::string error;  // a part of the message; it always names the option
};

TEST(NatsOptions, BadValuesAreRefusedNamingTheOption) {
  const std::vector<BadCase> cases = {
      {{Opt("bootstrap.servers", "x")}, "unknown option \"bootstrap.servers\" (valid: servers,"},
      {{Opt("Servers", "x")}, "unknown option \"Servers\""},
      {{Num("servers", "4222")}, "option \"servers\" must be a JSON string"},
      {{Other("servers")}, "option \"servers\" must be a JSON string"},
      {{Opt("servers", "")}, "option \"servers\" holds an empty server address"},
      {{Opt("servers", "a:1,,b:2")}, "option \"servers\" holds an empty server address"},
      {{Opt("servers", "http://a:1")}, "option \"servers\" has \"http://a:1\": the scheme"},
      {{Opt("servers", "nats://a:1/path")}, "option \"servers\" has \"nats://a:1/path\""},
      {{Opt("servers", "a:0")}, "a port is 1 to 65535"},
      {{Opt("servers", "a:65536")}, "a port is 1 to 65535"},
      {{Opt("servers", "a:")}, "a port is 1 to 65535"},
      {{Opt("servers", "a:x1")}, "a port is 1 to 65535"},
      {{Opt("servers", "::1")}, "an IPv6 address goes in brackets"},
      {{Opt("servers", "[zz]:1")}, "not an IPv6 address in brackets"},
      {{Opt("servers", "[::1")}, "an unclosed '['"},
      {{Opt("servers", "a b:1")}, "nothing more"},
      {{Opt("servers", "h\xc3\xa9:1")}, "nothing more"},
      {{Opt("servers", "a!:1")}, "not a host name or address"},
      {{Opt("servers", ":4222")}, "no host"},
      {{Opt("user", "")}, "option \"user\" must not be empty"},
      {{Opt("user", "u\"x"), Opt("password", "p")}, "option \"user\" must not hold double quotes"},
      {{Opt("user", "u"), Opt("password", "a\\b")}, "option \"password\" must not hold"},
      {{Opt("token", "t\nx")}, "option \"token\" must not hold"},
      {{Opt("password", "pw")}, "option \"password\" needs option \"user\""},
      {{Opt("user", "u")}, "option \"user\" needs option \"password\""},
      {{Opt("token", "t"), Opt("user", "u"), Opt("password", "p")},
       "option \"token\" cannot be combined"},
      {{Num("password", "1")}, "option \"password\" must be a JSON string"},
      {{Opt("tls", "yes")}, "option \"tls\" must be \"true\" or \"false\", not \"yes\""},
      {{Other("tls")}, "option \"tls\" must be a JSON string"},
      {{Opt("tls", "false"), Opt("servers", "tls://a.example")},
       "option \"tls\" is \"false\" but \"servers\" names a tls:// server"},
      {{Opt("tls_hostname", "a.example")}, "option \"tls_hostname\" applies only with TLS"},
      {{Opt("tls", "true"), Opt("tls_hostname", "")}, "option \"tls_hostname\" must be a host"},
      {{Opt("tls", "true"), Opt("tls_hostname", "a/b")}, "option \"tls_hostname\" must be a host"},
      {{Opt("tls", "true")},
       "option \"tls_hostname\" is needed with TLS when the server is given "
       "by IP address"},
      {{Opt("tls", "true"), Opt("servers", "a.example,b.example")},
       "option \"tls_hostname\" is needed with TLS when the servers have different hosts"},
      {{Opt("connect_timeout_ms", "99")}, "option \"connect_timeout_ms\" must be between 100 and"},
      {{Num("connect_timeout_ms", "60001")}, "option \"connect_timeout_ms\" must be between"},
      {{Opt("connect_timeout_ms", "1s")}, "option \"connect_timeout_ms\" must be an integer"},
      {{Opt("ack_timeout_ms", "+500")}, "option \"ack_timeout_ms\" must be an integer"},
      {{Num("ack_timeout_ms", "500.5")}, "option \"ack_timeout_ms\" must be an integer"},
      {{Opt("ack_timeout_ms", "500.0")}, "option \"ack_timeout_ms\" must be an integer"},
      {{Num("ack_timeout_ms", "300001")},
       "option \"ack_timeout_ms\" must be between 100 and 300000"},
      {{Num("ack_timeout_ms", "99999999999999999999")}, "must be an integer"},
      {{Other("ack_timeout_ms")}, "option \"ack_timeout_ms\" must be a JSON string or number"},
      {{SinkOption{"password", SinkOption::Kind::kUnresolved, "names no environment variable"}},
       "option \"password\" names no environment variable"},
  };
  for (const BadCase &c : cases) {
    NatsOptions o;
    o.ack_timeout_ms = 1234;  // left alone on error
    const std::optional<std::string> error = ParseNatsOptions(c.options, &o);
    ASSERT_TRUE(error.has_value()) << c.error;
    EXPECT_TRUE(Contains(*error, c.error));
    EXPECT_EQ(o.ack_timeout_ms, 1234) << c.error;
    EXPECT_EQ(ValidateNatsOptions(c.options), error);
  }
}

TEST(NatsOptions, SecretsAreNeverQuoted) {
  const std::string secret = "S3cret-Value-42";
  for (const SinkOptions &options : std::vector<SinkOptions>{
           {Opt("user", "u"), Opt("password", secret + "\"")},
           {Opt("token", secret + "\n")},
           {Opt("servers", "nats://u:" + secret + "@a:1")},
           {Opt("servers", secret + "@a:1")},
           {Opt("token", secret), Opt("user", "u"), Opt("password", secret)}}) {
    const std::optional<std::string> error = ParseNatsOptions(options, nullptr);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->find(secret), std::string::npos) << *error;
  }
  EXPECT_TRUE(Contains(*ParseNatsOptions({Opt("servers", "nats://u:p@a:1")}, nullptr),
                       "holds credentials in a server address"));
}

TEST(NatsOptions, TheLastValueOfAnOptionWins) {
  NatsOptions o;
  ASSERT_EQ(ParseNatsOptions({Opt("servers", "tls://a.example"), Opt("servers", "b:1")}, &o),
            std::nullopt);
  EXPECT_FALSE(o.tls);  // the tls:// server is no longer listed
  EXPECT_EQ(NatsServerUrl(o.servers[0]), "nats://b:1");
}

TEST(NatsOptions, TooManyServersAreRefused) {
  std::string list;
  for (int i = 0; i <= 32; ++i) list += (i ? "," : "") + std::string("h") + std::to_string(i);
  EXPECT_TRUE(Contains(*ParseNatsOptions({Opt("servers", list)}, nullptr),
                       "option \"servers\" lists more than 32 servers"));
}

TEST(NatsSubjects, RouteTargetsAreLiteralSubjects) {
  struct Case {
    std::string subject;
    std::optional<std::string> refused;  // part of the reason
  };
  const std::vector<Case> cases = {
      {"orders", std::nullopt},
      {"orders.created.v1", std::nullopt},
      {"Orders-2024_x.$KV.y", std::nullopt},
      {"$KV.bucket.key", std::nullopt},  // a key-value bucket is a stream
      {"_INBOX.x", std::nullopt},
      {std::string(1024, 'a'), std::nullopt},
      {"", "must not be empty"},
      {std::string(1025, 'a'), "at most 1024 bytes"},
      {"orders.*", "no wildcards"},
      {"orders.>", "no wildcards"},
      {"a*b", "no wildcards"},
      {"a>b", "no wildcards"},
      {"orders created", "without spaces"},
      {"orders\tx", "without spaces"},
      {"orders\x7f", "without spaces"},
      {"caf\xc3\xa9", "non-ASCII"},
      {".orders", "none of them empty"},
      {"orders.", "none of them empty"},
      {"orders..x", "none of them empty"},
      {".", "none of them empty"},
      {"$JS.API.STREAM.DELETE.X", "server's own API"},
      {"$JS", "server's own API"},
      {"$JSC.x", "server's own API"},
      {"$SYS.REQ.SERVER.PING", "server's own API"},
      {"$NRG.x", "server's own API"},
  };
  for (const Case &c : cases) {
    const std::optional<std::string> why = CheckNatsSubject(c.subject);
    if (!c.refused) {
      EXPECT_EQ(why, std::nullopt) << c.subject;
    } else {
      ASSERT_TRUE(why.has_value()) << c.subject;
      EXPECT_TRUE(Contains(*why, *c.refused)) << c.subject;
      EXPECT_EQ(why->back(), '.');  // a sentence, for an errdetail
    }
  }
}

}  // namespace
}  // namespace outbox
