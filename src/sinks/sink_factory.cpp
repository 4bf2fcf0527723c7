// The one place that knows every kind of sink (sink_factory.hpp).
#include "sinks/sink_factory.hpp"

#include "core/names.hpp"
#include "sinks/kafka_sink.hpp"
#include "sinks/redis_sink.hpp"
#include "sinks/sink_options.hpp"
#ifdef OUTBOX_WITH_AMQP
#include "sinks/amqp_options.hpp"
#include "sinks/amqp_sink.hpp"
#endif
#ifdef OUTBOX_WITH_NATS
#include "sinks/nats_options.hpp"
#include "sinks/nats_sink.hpp"
#endif
#ifdef OUTBOX_WITH_MQTT
#include "sinks/mqtt_options.hpp"
#include "sinks/mqtt_sink.hpp"
#endif
#ifdef OUTBOX_WITH_HTTP
#include "sinks/http_options.hpp"
#include "sinks/http_sink.hpp"
#endif

namespace outbox {

bool IsSinkKind(std::string_view kind) {
  return kind == "kafka" || kind == "redis" || kind == "amqp" || kind == "nats" || kind == "mqtt" ||
         kind == "http";
}

bool SinkKindBuilt(std::string_view kind) {
  if (kind == "kafka" || kind == "redis") return true;
#ifdef OUTBOX_WITH_AMQP
  if (kind == "amqp") return true;
#endif
#ifdef OUTBOX_WITH_NATS
  if (kind == "nats") return true;
#endif
#ifdef OUTBOX_WITH_MQTT
  if (kind == "mqtt") return true;
#endif
#ifdef OUTBOX_WITH_HTTP
  if (kind == "http") return true;
#endif
  return false;
}

const char *SinkKindList() { return "'kafka', 'redis', 'amqp', 'nats', 'mqtt' or 'http'"; }

const char *SinkKindLibrary(std::string_view kind) {
  if (kind == "amqp") return "librabbitmq (librabbitmq-dev)";
  if (kind == "nats") return "libnats (libnats-dev)";
  if (kind == "mqtt") return "libmosquitto (libmosquitto-dev)";
  if (kind == "http") return "libcurl (libcurl4-openssl-dev)";
  return "its client library";
}

namespace {

std::string NotBuilt(std::string_view kind) {
  return "this build of outbox has no " + std::string(kind) + " sink (it was built without " +
         SinkKindLibrary(kind) + ")";
}

}  // namespace

std::optional<std::string> ValidateSinkOptions(std::string_view kind, const SinkOptions &options,
                                               bool privileged) {
  if (!IsSinkKind(kind)) return "unknown kind of sink \"" + std::string(kind) + "\"";
  if (!SinkKindBuilt(kind)) return NotBuilt(kind);
  if (std::optional<std::string> invalid = CheckSecretSources(options, privileged)) return invalid;
  if (kind == "kafka") return ValidateKafkaOptions(options, privileged);
  if (kind == "redis") return ParseRedisOptions(options, nullptr);
#ifdef OUTBOX_WITH_AMQP
  if (kind == "amqp") return ValidateAmqpOptions(options);
#endif
#ifdef OUTBOX_WITH_NATS
  if (kind == "nats") return ValidateNatsOptions(options);
#endif
#ifdef OUTBOX_WITH_MQTT
  if (kind == "mqtt") return ValidateMqttOptions(options);
#endif
#ifdef OUTBOX_WITH_HTTP
  if (kind == "http") return ValidateHttpOptions(options);
#endif
  return NotBuilt(kind);
}

std::optional<std::string> CheckRouteTarget(std::string_view kind, std::string_view target) {
  if (kind == "kafka") {
    if (IsValidKafkaTopic(target)) return std::nullopt;
    return "A Kafka topic is 1 to 249 characters of [A-Za-z0-9._-], and neither \".\" nor \"..\".";
  }
  if (kind == "redis") {
    if (!target.empty()) return std::nullopt;
    return "A Redis key must not be empty.";
  }
#ifdef OUTBOX_WITH_AMQP
  if (kind == "amqp") return CheckAmqpRoutingKey(target);
#endif
#ifdef OUTBOX_WITH_NATS
  if (kind == "nats") return CheckNatsSubject(target);
#endif
#ifdef OUTBOX_WITH_MQTT
  if (kind == "mqtt") return CheckMqttTopic(target);
#endif
#ifdef OUTBOX_WITH_HTTP
  if (kind == "http") return CheckHttpTarget(target);
#endif
  return std::nullopt;  // a kind this build lacks: its sink is never built
}

std::optional<std::string> CheckRouteFormat(std::string_view kind, MessageFormat format) {
  if (kind == "kafka" || kind == "redis") return std::nullopt;
  if (format == MessageFormat::kRaw || format == MessageFormat::kCloudEvents) return std::nullopt;
  return "Routes to " + std::string(kind) + " sinks take format raw or cloudevents.";
}

std::unique_ptr<Sink> MakeSink(std::string_view name, std::string_view kind,
                               const SinkOptions &options, bool privileged, std::string *error) {
  if (std::optional<std::string> invalid = CheckSecretSources(options, privileged)) {
    *error = std::move(*invalid);
    return nullptr;
  }
  if (kind == "kafka") return MakeKafkaSink(std::string(name), options, error, privileged);
  if (kind == "redis") return MakeRedisSink(std::string(name), options, error);
#ifdef OUTBOX_WITH_AMQP
  if (kind == "amqp") return MakeAmqpSink(std::string(name), options, error);
#endif
#ifdef OUTBOX_WITH_NATS
  if (kind == "nats") return MakeNatsSink(std::string(name), options, error);
#endif
#ifdef OUTBOX_WITH_MQTT
  if (kind == "mqtt") return MakeMqttSink(std::string(name), options, error);
#endif
#ifdef OUTBOX_WITH_HTTP
  if (kind == "http") return MakeHttpSink(std::string(name), options, error);
#endif
  *error = IsSinkKind(kind)
               ? NotBuilt(kind)
               : "sinks of kind \"" + std::string(kind) + "\" are not supported by this version";
  return nullptr;
}

}  // namespace outbox
