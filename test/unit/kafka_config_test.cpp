// The Kafka producer's configuration (sinks/kafka_config.hpp), read back from
// librdkafka without creating a producer.
#include "sinks/kafka_config.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <string>

namespace outbox {
namespace {

using namespace test_support;

// A property's value as librdkafka holds it, global or topic-level.
std::string Get(rd_kafka_conf_t *conf, const char *key) {
  char value[512];
  size_t size = sizeof value;
  if (rd_kafka_conf_get(conf, key, value, &size) == RD_KAFKA_CONF_OK) return value;
  size = sizeof value;
  const rd_kafka_topic_conf_t *topic_conf = rd_kafka_conf_get_default_topic_conf(conf);
  if (topic_conf != nullptr &&
      rd_kafka_topic_conf_get(topic_conf, key, value, &size) == RD_KAFKA_CONF_OK) {
    return value;
  }
  return "(unknown)";
}

const SinkOption kBootstrap = Opt("bootstrap.servers", "127.0.0.1:9092");

TEST(KafkaConfig, OurDefaultsApplyUnlessTheOptionsSetThem) {
  std::string error;
  KafkaConfPtr conf = NewKafkaConf("orders", {kBootstrap}, &error);
  ASSERT_NE(conf, nullptr) << error;
  EXPECT_EQ(Get(conf.get(), "client.id"), "outbox-orders");
  EXPECT_EQ(Get(conf.get(), "bootstrap.servers"), "127.0.0.1:9092");
  EXPECT_EQ(Get(conf.get(), "enable.idempotence"), "true");
  EXPECT_EQ(Get(conf.get(), "partitioner"), "murmur2_random");
  EXPECT_EQ(KafkaMessageTimeoutMs(conf.get()), 10000);

  conf = NewKafkaConf("orders",
                      {kBootstrap, Opt("client.id", "mine"), Opt("enable.idempotence", "false"),
                       Opt("partitioner", "consistent"), Opt("message.timeout.ms", "4000")},
                      &error);
  ASSERT_NE(conf, nullptr) << error;
  EXPECT_EQ(Get(conf.get(), "client.id"), "mine");
  EXPECT_EQ(Get(conf.get(), "enable.idempotence"), "false");
  EXPECT_EQ(Get(conf.get(), "partitioner"), "consistent");
  EXPECT_EQ(KafkaMessageTimeoutMs(conf.get()), 4000);
}

TEST(KafkaConfig, LogLinesStayOnTheMainQueueWhateverTheOptionsSay) {
  std::string error;
  KafkaConfPtr conf = NewKafkaConf("s", {kBootstrap, Opt("log.queue", "false")}, &error);
  ASSERT_NE(conf, nullptr) << error;
  EXPECT_EQ(Get(conf.get(), "log.queue"), "true");
}

TEST(KafkaConfig, ARefusedValueIsNamedInLibrdkafkasWordsWithoutTheNewline) {
  std::string error;
  EXPECT_EQ(NewKafkaConf("s", {kBootstrap, Opt("linger.ms", "soon")}, &error), nullptr);
  EXPECT_EQ(error.rfind("option \"linger.ms\": ", 0), 0u) << error;
  ASSERT_FALSE(error.empty());
  EXPECT_NE(error.back(), '\n');
  EXPECT_EQ(NewKafkaConf("s", {Opt("no.such.property", "1")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "no.such.property"));

  EXPECT_EQ(TrimmedKafkaText("Invalid value \n"), "Invalid value");
  EXPECT_EQ(TrimmedKafkaText("\n"), "");
  EXPECT_EQ(TrimmedKafkaText(""), "");
}

TEST(KafkaConfig, MessageTimeoutIsReadAsLibrdkafkaAppliesIt) {
  // No topic-level property set, so no default topic configuration to read:
  // our default.
  KafkaConfPtr bare(rd_kafka_conf_new());
  EXPECT_EQ(KafkaMessageTimeoutMs(bare.get()), 10000);
  std::string error;
  // 0 is librdkafka's "no limit": the sink waits its own unlimited_ms then.
  KafkaConfPtr conf = NewKafkaConf("s", {kBootstrap, Opt("message.timeout.ms", "0")}, &error);
  ASSERT_NE(conf, nullptr) << error;
  EXPECT_EQ(KafkaMessageTimeoutMs(conf.get()), 0);
}

}  // namespace
}  // namespace outbox
