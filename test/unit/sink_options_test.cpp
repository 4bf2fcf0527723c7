// Validation of outbox.create_sink() options for the Kafka and Redis sinks.
#include "sinks/sink_options.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

namespace outbox {
namespace {

using namespace test_support;

SinkOption Num(std::string key, std::string text) {
  return SinkOption{std::move(key), SinkOption::Kind::kNumber, std::move(text)};
}
SinkOption Other(std::string key) {
  return SinkOption{std::move(key), SinkOption::Kind::kOther, ""};
}

const SinkOption kBootstrap = Opt("bootstrap.servers", "127.0.0.1:9092");

// ---------------------------------------------------------------- Kafka

TEST(KafkaSinkOptions, BootstrapServersAloneIsValid) {
  EXPECT_EQ(ValidateKafkaOptions({kBootstrap}), std::nullopt);
}

TEST(KafkaSinkOptions, MetadataBrokerListAlsoNamesTheBrokers) {
  EXPECT_EQ(ValidateKafkaOptions({Opt("metadata.broker.list", "k1:9092,k2:9092")}), std::nullopt);
}

TEST(KafkaSinkOptions, OrdinaryProducerSettingsAreValid) {
  EXPECT_EQ(ValidateKafkaOptions({kBootstrap, Opt("acks", "all"), Opt("linger.ms", "5"),
                                  Opt("enable.idempotence", "true"), Opt("client.id", "outbox"),
                                  Opt("message.timeout.ms", "30000")}),
            std::nullopt);
}

TEST(KafkaSinkOptions, UnknownPropertyReportsLibrdkafkaMessage) {
  const auto err = ValidateKafkaOptions({kBootstrap, Opt("no.such.setting", "1")});
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(*err, "No such configuration property"));
  EXPECT_TRUE(Contains(*err, "no.such.setting"));
}

TEST(KafkaSinkOptions, InvalidValueForKnownPropertyIsRejected) {
  {
    const auto err = ValidateKafkaOptions({kBootstrap, Opt("acks", "banana")});
    ASSERT_TRUE(err.has_value());
    EXPECT_TRUE(Contains(*err, "acks"));
    EXPECT_TRUE(Contains(*err, "Invalid value"));
  }
  {
    const auto err = ValidateKafkaOptions({kBootstrap, Opt("linger.ms", "-5")});
    ASSERT_TRUE(err.has_value());
    EXPECT_TRUE(Contains(*err, "linger.ms"));
    EXPECT_TRUE(Contains(*err, "outside allowed range"));
  }
  {
    const auto err = ValidateKafkaOptions({kBootstrap, Opt("enable.idempotence", "maybe")});
    ASSERT_TRUE(err.has_value());
    EXPECT_TRUE(Contains(*err, "enable.idempotence"));
  }
}

TEST(KafkaSinkOptions, ErrorMessageHasNoTrailingNewline) {
  // librdkafka ends its range message with '\n'; ours is one clean line.
  for (const SinkOption &bad : {Opt("linger.ms", "-5"), Opt("batch.size", "-1"),
                                Opt("acks", "banana"), Opt("no.such.setting", "1")}) {
    const auto err = ValidateKafkaOptions({kBootstrap, bad});
    ASSERT_TRUE(err.has_value()) << bad.key;
    ASSERT_FALSE(err->empty());
    EXPECT_EQ(err->find('\n'), std::string::npos) << '"' << *err << '"';
    EXPECT_NE(err->back(), ' ') << '"' << *err << '"';
  }
}

TEST(KafkaSinkOptions, InvalidOptionIsReportedWhateverItsPosition) {
  EXPECT_TRUE(ValidateKafkaOptions({Opt("acks", "banana"), kBootstrap}).has_value());
  EXPECT_TRUE(ValidateKafkaOptions({kBootstrap, Opt("acks", "banana")}).has_value());
}

TEST(KafkaSinkOptions, NonStringValuesAreRejectedNamingTheKey) {
  for (const SinkOption &opt : {Num("linger.ms", "5"), Other("acks"), Num("batch.size", "1")}) {
    const auto err = ValidateKafkaOptions({kBootstrap, opt});
    ASSERT_TRUE(err.has_value()) << opt.key;
    EXPECT_TRUE(Contains(*err, "\"" + opt.key + "\"")) << *err;
    EXPECT_TRUE(Contains(*err, "string")) << *err;
  }
  const auto err = ValidateKafkaOptions({Other("bootstrap.servers")});
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(*err, "bootstrap.servers"));
}

TEST(KafkaSinkOptions, BootstrapServersIsRequired) {
  for (const SinkOptions &opts : {SinkOptions{}, SinkOptions{Opt("acks", "all")},
                                  SinkOptions{Opt("bootstrap.servers", "")}}) {
    const auto err = ValidateKafkaOptions(opts);
    ASSERT_TRUE(err.has_value());
    EXPECT_TRUE(Contains(*err, "bootstrap.servers"));
  }
}

// DISABLED: known bug in ValidateKafkaOptions (src/sinks/sink_options.cpp). The two
// keys are aliases of one librdkafka property, so a later empty
// metadata.broker.list clears the brokers bootstrap.servers set; jsonb always
// orders "bootstrap.servers" first, so this input reaches the publisher with
// no brokers. Enable once the check tracks the last value written.
TEST(KafkaSinkOptions, EmptyAliasAfterBootstrapServersLeavesNoBrokers) {
  const auto err = ValidateKafkaOptions({kBootstrap, Opt("metadata.broker.list", "")});
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(*err, "bootstrap.servers"));
}

TEST(KafkaSinkOptions, PluginLibraryPathsIsNotAllowed) {
  // Must be refused before librdkafka tries to load anything.
  const auto err = ValidateKafkaOptions({kBootstrap, Opt("plugin.library.paths", "/tmp/evil.so")});
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(*err, "plugin.library.paths"));
  EXPECT_TRUE(Contains(*err, "not allowed"));
}

TEST(KafkaSinkOptions, PropertiesThatRunCodeOrBreakDeliveryAreNotAllowed) {
  // Each would run a program or load a library as the server's OS user when
  // the publisher creates the producer (transactional.id: fail every send).
  for (const char *key : {"interceptors", "sasl.kerberos.kinit.cmd", "ssl.engine.location",
                          "ssl.providers", "transactional.id"}) {
    const auto err = ValidateKafkaOptions({kBootstrap, Opt(key, "touch /tmp/outbox-pwned")});
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_TRUE(Contains(*err, key));
    EXPECT_TRUE(Contains(*err, "not allowed"));
  }
}

// Kafka options are an allowlist. Known librdkafka properties that are
// not on it are refused without being set (some act as they are set).
TEST(KafkaSinkOptions, KnownPropertiesOffTheAllowlistAreRefused) {
  for (const char *key :
       {"log.queue", "statistics.interval.ms", "enable.random.seed", "ssl.engine.id", "group.id"}) {
    const auto err = ValidateKafkaOptions({kBootstrap, Opt(key, "1")}, true);
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_TRUE(Contains(*err, std::string("\"") + key + "\"")) << *err;
    EXPECT_TRUE(Contains(*err, "not allowed")) << *err;
    EXPECT_EQ(ClassifyKafkaProperty(key), KafkaPropertyUse::kRefused) << key;
  }
}

// Files, URLs and Kerberos (whose default kinit command interpolates the
// principal and keytab into /bin/sh): only a superuser may set them.
TEST(KafkaSinkOptions, FileUrlAndKerberosPropertiesNeedASuperuser) {
  for (const char *key : {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
                          "ssl.keystore.location", "ssl.crl.location", "sasl.kerberos.principal",
                          "sasl.kerberos.keytab", "sasl.kerberos.service.name", "debug"}) {
    const std::string value = std::string(key) == "debug" ? "broker" : "$(touch /tmp/outbox-pwned)";
    const auto err = ValidateKafkaOptions({kBootstrap, Opt(key, value)});
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_TRUE(Contains(*err, "superuser")) << *err;
    EXPECT_EQ(ClassifyKafkaProperty(key), KafkaPropertyUse::kSuperuser) << key;
    EXPECT_EQ(ValidateKafkaOptions({kBootstrap, Opt(key, value)}, true), std::nullopt) << key;
  }
}

// SASL's default mechanism is GSSAPI, which runs kinit through /bin/sh.
TEST(KafkaSinkOptions, SaslWithoutAMechanismOrWithGssapiNeedsASuperuser) {
  for (const SinkOptions &opts :
       {SinkOptions{kBootstrap, Opt("security.protocol", "sasl_ssl")},
        SinkOptions{kBootstrap, Opt("security.protocol", "SASL_PLAINTEXT"),
                    Opt("sasl.mechanisms", "gssapi")},
        SinkOptions{kBootstrap, Opt("sasl.mechanism", "GSSAPI"),
                    Opt("security.protocol", "sasl_plaintext")}}) {
    const auto err = ValidateKafkaOptions(opts);
    ASSERT_TRUE(err.has_value());
    EXPECT_TRUE(Contains(*err, "GSSAPI")) << *err;
    EXPECT_EQ(ValidateKafkaOptions(opts, true), std::nullopt);
  }
  for (const char *mechanism : {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}) {
    EXPECT_EQ(ValidateKafkaOptions({kBootstrap, Opt("security.protocol", "sasl_ssl"),
                                    Opt("sasl.mechanisms", mechanism)}),
              std::nullopt)
        << mechanism;
  }
}

// Names off the allowlist never reach librdkafka: an unknown one is refused
// in librdkafka's words, whatever librdkafka would make of it (topic.acks
// is a topic property to librdkafka).
TEST(KafkaSinkOptions, UnknownNamesAreRefusedWithoutReachingLibrdkafka) {
  for (const char *key : {"no.such.property", "topic.acks", "topic.foo", "X-a b"}) {
    const auto err = ValidateKafkaOptions({kBootstrap, Opt(key, "1")}, true);
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_TRUE(Contains(*err, std::string("No such configuration property: \"") + key + "\""))
        << *err;
  }
}

TEST(KafkaSinkOptions, LibrdkafkasOwnListOfPropertiesIsRead) {
  for (const char *key : {"bootstrap.servers", "acks", "plugin.library.paths", "interceptors",
                          "sasl.kerberos.kinit.cmd", "log.queue"}) {
    EXPECT_TRUE(KnownToLibrdkafka(key)) << key;
  }
  EXPECT_FALSE(KnownToLibrdkafka("no.such.property"));
  EXPECT_FALSE(KnownToLibrdkafka("Property"));
}

TEST(KafkaSinkOptions, WhatAProducerNeedsIsAllowedToEveryAdmin) {
  EXPECT_EQ(ValidateKafkaOptions({kBootstrap, Opt("security.protocol", "sasl_ssl"),
                                  Opt("sasl.mechanisms", "SCRAM-SHA-512"),
                                  Opt("sasl.username", "u"), Opt("sasl.password", "p"),
                                  Opt("compression.type", "zstd"), Opt("linger.ms", "5"),
                                  Opt("message.timeout.ms", "30000"), Opt("client.id", "shop")}),
            std::nullopt);
}

TEST(KafkaSinkOptions, RefusedPropertiesAreRefusedEvenForASuperuser) {
  for (const char *key : {"plugin.library.paths", "interceptors", "sasl.kerberos.kinit.cmd",
                          "ssl.engine.location", "ssl.providers", "transactional.id"}) {
    const auto err = ValidateKafkaOptions({kBootstrap, Opt(key, "touch /tmp/outbox-pwned")}, true);
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_TRUE(Contains(*err, "not allowed")) << *err;
  }
}

// Secrets from the server's environment: only OUTBOX_ variables.
TEST(SinkOptions, OnlyOutboxVariablesHoldSecrets) {
  for (const char *good : {"OUTBOX_KAFKA_PASSWORD", "OUTBOX_1", "OUTBOX_A_B_C"}) {
    EXPECT_TRUE(IsSecretVariableName(good)) << good;
  }
  for (const char *bad : {"", "OUTBOX_", "HOME", "PGPASSWORD", "outbox_x", "OUTBOX_x", "OUTBOX_A-B",
                          "XOUTBOX_A", "OUTBOX_A B"}) {
    EXPECT_FALSE(IsSecretVariableName(bad)) << bad;
  }
  EXPECT_FALSE(IsSecretVariableName("OUTBOX_" + std::string(65, 'A')));
  EXPECT_TRUE(IsSecretVariableName("OUTBOX_" + std::string(64, 'A')));
}

// Red team: any OUTBOX_ variable could be read into any option, where a
// validator quoted it back (Redis mode), or into another database's sink.
TEST(SinkOptions, ValuesFromTheEnvironmentAreASuperusersAndOnlyForSecrets) {
  SinkOption password{"sasl.password", SinkOption::Kind::kString, "s3cret", true};
  EXPECT_EQ(CheckSecretSources({password}, true), std::nullopt);
  const auto not_super = CheckSecretSources({password}, false);
  ASSERT_TRUE(not_super.has_value());
  EXPECT_TRUE(Contains(*not_super, "superuser")) << *not_super;
  EXPECT_FALSE(Contains(*not_super, "s3cret"));
  for (const char *key : {"mode", "compression.type", "bootstrap.servers", "port"}) {
    const auto err = CheckSecretSources({{key, SinkOption::Kind::kString, "s3cret", true}}, true);
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_FALSE(Contains(*err, "s3cret")) << *err;
  }
  EXPECT_EQ(CheckSecretSources({{"password", SinkOption::Kind::kString, "x", true}}, true),
            std::nullopt);
  EXPECT_EQ(CheckSecretSources({Opt("mode", "stream")}, false), std::nullopt);
}

TEST(SinkOptions, AnUnresolvedReferenceIsRefusedWithItsReason) {
  const SinkOption unresolved{"sasl.password", SinkOption::Kind::kUnresolved,
                              "names environment variable OUTBOX_X, which the server's "
                              "environment lacks"};
  const auto kafka = ValidateKafkaOptions({kBootstrap, unresolved});
  ASSERT_TRUE(kafka.has_value());
  EXPECT_TRUE(Contains(*kafka, "\"sasl.password\" names environment variable OUTBOX_X")) << *kafka;
  const SinkOption redis_unresolved{"password", SinkOption::Kind::kUnresolved, "names x"};
  const auto redis = ParseRedisOptions({redis_unresolved}, nullptr);
  ASSERT_TRUE(redis.has_value());
  EXPECT_TRUE(Contains(*redis, "\"password\" names x")) << *redis;
}

// ---------------------------------------------------------------- Redis

RedisOptions Parsed(const SinkOptions &opts) {
  RedisOptions out;
  const auto err = ParseRedisOptions(opts, &out);
  EXPECT_EQ(err, std::nullopt);
  return out;
}

// The error for opts, or "" when (wrongly) accepted.
std::string RedisError(const SinkOptions &opts) {
  RedisOptions out;
  return ParseRedisOptions(opts, &out).value_or("");
}

TEST(RedisSinkOptions, EmptyOptionsGiveDefaults) {
  const RedisOptions r = Parsed({});
  EXPECT_EQ(r.host, "127.0.0.1");
  EXPECT_EQ(r.port, 6379);
  EXPECT_EQ(r.db, 0);
  EXPECT_EQ(r.mode, RedisOptions::Mode::kStream);
  EXPECT_EQ(r.maxlen, std::nullopt);
  EXPECT_EQ(r.password, std::nullopt);
}

TEST(RedisSinkOptions, AllOptionsAsStrings) {
  const RedisOptions r =
      Parsed({Opt("host", "redis.internal"), Opt("port", "6380"), Opt("db", "3"),
              Opt("password", "s3cret"), Opt("mode", "stream"), Opt("maxlen", "100000")});
  EXPECT_EQ(r.host, "redis.internal");
  EXPECT_EQ(r.port, 6380);
  EXPECT_EQ(r.db, 3);
  EXPECT_EQ(r.password, "s3cret");
  EXPECT_EQ(r.mode, RedisOptions::Mode::kStream);
  EXPECT_EQ(r.maxlen, 100000);
}

TEST(RedisSinkOptions, PortDbAndMaxlenAcceptJsonNumbers) {
  const RedisOptions r = Parsed({Num("port", "6381"), Num("db", "15"), Num("maxlen", "500")});
  EXPECT_EQ(r.port, 6381);
  EXPECT_EQ(r.db, 15);
  EXPECT_EQ(r.maxlen, 500);
}

TEST(RedisSinkOptions, IntegralJsonNumbersWithAFractionAreIntegers) {
  const RedisOptions r =
      Parsed({Num("port", "6379.0"), Num("db", "2.00"), Num("maxlen", "1000.000")});
  EXPECT_EQ(r.port, 6379);
  EXPECT_EQ(r.db, 2);
  EXPECT_EQ(r.maxlen, 1000);
  for (const char *text : {"6379.5", "6379.01", "6379.", "6379.0x"}) {
    EXPECT_TRUE(Contains(RedisError({Num("port", text)}), "integer")) << text;
  }
  EXPECT_TRUE(Contains(RedisError({Opt("port", "6379.0")}), "integer"));  // strings stay strict
}

TEST(RedisSinkOptions, PortRangeIs1To65535) {
  EXPECT_EQ(Parsed({Opt("port", "1")}).port, 1);
  EXPECT_EQ(Parsed({Num("port", "65535")}).port, 65535);
  for (const SinkOption &opt : {Num("port", "0"), Num("port", "65536"), Opt("port", "-1"),
                                Opt("port", "0"), Opt("port", "99999999999999999999")}) {
    EXPECT_TRUE(Contains(RedisError({opt}), "port")) << opt.text;
  }
}

TEST(RedisSinkOptions, IntegersMustBePlainDecimal) {
  for (const char *text : {"abc", " 12", "12 ", "+12", "1.5", "1e3", "0x10", "", "-", "12abc"}) {
    EXPECT_TRUE(Contains(RedisError({Opt("port", text)}), "\"port\"")) << '"' << text << '"';
    EXPECT_TRUE(Contains(RedisError({Opt("db", text)}), "\"db\"")) << '"' << text << '"';
    EXPECT_TRUE(Contains(RedisError({Opt("maxlen", text)}), "\"maxlen\"")) << '"' << text << '"';
  }
  EXPECT_TRUE(Contains(RedisError({Num("port", "1.5")}), "integer"));
}

TEST(RedisSinkOptions, DbRangeIs0ToInt32Max) {
  EXPECT_EQ(Parsed({Opt("db", "0")}).db, 0);
  EXPECT_EQ(Parsed({Opt("db", "2147483647")}).db, 2147483647);
  EXPECT_TRUE(Contains(RedisError({Opt("db", "-1")}), "db"));
  EXPECT_TRUE(Contains(RedisError({Opt("db", "2147483648")}), "db"));
}

TEST(RedisSinkOptions, MaxlenMustBePositive) {
  EXPECT_EQ(Parsed({Opt("maxlen", "1")}).maxlen, 1);
  EXPECT_TRUE(Contains(RedisError({Opt("maxlen", "0")}), "maxlen"));
  EXPECT_TRUE(Contains(RedisError({Num("maxlen", "-10")}), "maxlen"));
}

TEST(RedisSinkOptions, UnknownKeyIsRejectedByName) {
  const std::string err = RedisError({Opt("hostname", "redis")});
  EXPECT_TRUE(Contains(err, "unknown option"));
  EXPECT_TRUE(Contains(err, "\"hostname\""));
  EXPECT_TRUE(Contains(RedisError({Opt("Host", "redis")}), "\"Host\""));
  EXPECT_TRUE(Contains(RedisError({Opt("bootstrap.servers", "x:9092")}), "bootstrap.servers"));
}

TEST(RedisSinkOptions, ModeIsStreamPublishOrList) {
  EXPECT_EQ(Parsed({Opt("mode", "stream")}).mode, RedisOptions::Mode::kStream);
  EXPECT_EQ(Parsed({Opt("mode", "publish")}).mode, RedisOptions::Mode::kPublish);
  EXPECT_EQ(Parsed({Opt("mode", "list")}).mode, RedisOptions::Mode::kList);
  for (const char *bad : {"pubsub", "Stream", "", "streams"}) {
    const std::string err = RedisError({Opt("mode", bad)});
    EXPECT_TRUE(Contains(err, "mode")) << bad;
    EXPECT_TRUE(Contains(err, std::string("\"") + bad + "\"")) << bad;
  }
}

TEST(RedisSinkOptions, MaxlenAppliesOnlyToStreams) {
  EXPECT_EQ(Parsed({Opt("mode", "stream"), Num("maxlen", "10")}).maxlen, 10);
  for (const char *mode : {"publish", "list"}) {
    // Whatever the order of the keys.
    EXPECT_TRUE(Contains(RedisError({Opt("mode", mode), Num("maxlen", "10")}), "maxlen"));
    EXPECT_TRUE(Contains(RedisError({Num("maxlen", "10"), Opt("mode", mode)}), "maxlen"));
  }
}

TEST(RedisSinkOptions, HostPasswordAndModeMustBeStrings) {
  for (const char *key : {"host", "password", "mode"}) {
    const std::string err = RedisError({Num(key, "1")});
    EXPECT_TRUE(Contains(err, std::string("\"") + key + "\"")) << key;
    EXPECT_TRUE(Contains(err, "string")) << key;
  }
}

TEST(RedisSinkOptions, NonScalarValuesAreRejected) {
  for (const char *key : {"host", "port", "db", "password", "mode", "maxlen"}) {
    EXPECT_TRUE(Contains(RedisError({Other(key)}), std::string("\"") + key + "\"")) << key;
  }
}

TEST(RedisSinkOptions, EmptyHostIsRejected) {
  EXPECT_TRUE(Contains(RedisError({Opt("host", "")}), "host"));
}

TEST(RedisSinkOptions, OutputIsLeftUntouchedWhenInvalid) {
  RedisOptions out;
  out.host = "sentinel";
  out.port = 1234;
  ASSERT_TRUE(ParseRedisOptions({Opt("host", "redis"), Opt("port", "0")}, &out).has_value());
  EXPECT_EQ(out.host, "sentinel");
  EXPECT_EQ(out.port, 1234);
}

}  // namespace
}  // namespace outbox
