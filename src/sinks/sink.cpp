// The one place that knows every kind of sink.
#include "core/dispatch.hpp"
#include "sinks/redis_sink.hpp"

#include <chrono>

namespace outbox {

int64_t UnixNowUs() noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void DescribeCurrentException(std::string *error) noexcept {
  try {
    error->clear();
    try {
      throw;
    } catch (const std::bad_alloc &) {
      *error = "out of memory";
    } catch (const std::exception &e) {
      *error = e.what();
    } catch (...) {
      *error = "unexpected error";
    }
  } catch (...) {
    // Assigning the text itself ran out of memory: leave it empty.
  }
}

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
