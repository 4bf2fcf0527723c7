// The sink factory the publisher hands to the dispatcher (core/sink_registry.hpp,
// SinkFactory): the one place that knows every kind of sink. A new kind of
// sink is one more line here (sinks/README.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/sink.hpp"

namespace outbox {

// A sink of `kind` ("kafka", "redis") named `name`, from create_sink()
// options; nullptr with *error set when the options are refused (a value
// from the environment a superuser did not give, see core/sink_option.hpp;
// the kind's own validation) or the kind is unknown. `privileged`: the
// options are a superuser's (SinkRow).
std::unique_ptr<Sink> MakeSink(std::string_view name, std::string_view kind,
                               const SinkOptions &options, bool privileged, std::string *error);

}  // namespace outbox
