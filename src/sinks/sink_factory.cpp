// The one place that knows every kind of sink (sink_factory.hpp).
#include "sinks/sink_factory.hpp"

#include "sinks/kafka_sink.hpp"
#include "sinks/redis_sink.hpp"
#include "sinks/sink_options.hpp"

namespace outbox {

std::unique_ptr<Sink> MakeSink(std::string_view name, std::string_view kind,
                               const SinkOptions &options, bool privileged, std::string *error) {
  if (std::optional<std::string> invalid = CheckSecretSources(options, privileged)) {
    *error = std::move(*invalid);
    return nullptr;
  }
  if (kind == "kafka") return MakeKafkaSink(std::string(name), options, error, privileged);
  if (kind == "redis") return MakeRedisSink(std::string(name), options, error);
  *error = "sinks of kind \"" + std::string(kind) + "\" are not supported by this version";
  return nullptr;
}

}  // namespace outbox
