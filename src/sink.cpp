// The one place that knows every kind of sink.
#include "dispatch.hpp"
#include "redis_sink.hpp"

namespace outbox {

std::unique_ptr<Sink> MakeSink(std::string_view name, std::string_view kind,
                               const SinkOptions &options, std::string *error) {
  if (kind == "kafka") return MakeKafkaSink(std::string(name), options, error);
  if (kind == "redis") return MakeRedisSink(std::string(name), options, error);
  *error = "sinks of kind \"" + std::string(kind) + "\" are not supported by this version";
  return nullptr;
}

}  // namespace outbox
