// The Kafka sink's librdkafka configuration (kafka_config.hpp).
#include "sinks/kafka_config.hpp"

#include <cstdlib>
#include <string>

namespace outbox {

namespace {

// Our defaults (docs/reference.md, the Kafka sink's options), set before the
// user's options so that the user wins.
constexpr const char *kDefaults[][2] = {
    {"enable.idempotence", "true"},    {"acks", "all"},
    {"partitioner", "murmur2_random"}, {"linger.ms", "1"},
    {"message.timeout.ms", "10000"},
};

}  // namespace

KafkaConfPtr NewKafkaConf(const std::string &name, const SinkOptions &options, std::string *error) {
  KafkaConfPtr conf(rd_kafka_conf_new());
  char errstr[512];
  auto set = [&](const std::string &key, const std::string &value) {
    errstr[0] = '\0';
    if (rd_kafka_conf_set(conf.get(), key.c_str(), value.c_str(), errstr, sizeof errstr) ==
        RD_KAFKA_CONF_OK) {
      return true;
    }
    *error = "option \"" + key + "\": " + TrimmedKafkaText(errstr);
    return false;
  };
  if (!set("client.id", "outbox-" + name)) return nullptr;
  for (const auto &property : kDefaults) {
    if (!set(property[0], property[1])) return nullptr;
  }
  for (const SinkOption &option : options) {
    if (!set(option.key, option.text)) return nullptr;
  }
  // Not the user's choice: without it log lines would be delivered on
  // librdkafka's threads.
  if (!set("log.queue", "true")) return nullptr;
  return conf;
}

int KafkaMessageTimeoutMs(rd_kafka_conf_t *conf) {
  const rd_kafka_topic_conf_t *topic_conf = rd_kafka_conf_get_default_topic_conf(conf);
  char value[32];
  size_t size = sizeof value;
  if (topic_conf == nullptr ||
      rd_kafka_topic_conf_get(topic_conf, "message.timeout.ms", value, &size) != RD_KAFKA_CONF_OK) {
    return 10000;
  }
  char *end = nullptr;
  const long ms = std::strtol(value, &end, 10);
  if (end == value || ms < 0 || ms > 900000000) return 10000;
  return static_cast<int>(ms);
}

std::string TrimmedKafkaText(const char *text) {
  std::string message(text);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

}  // namespace outbox
