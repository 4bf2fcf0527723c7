// The one place that knows every kind of sink: which kinds exist and which
// this build has, each kind's option validation and route rules, and the
// factory the publisher hands to the dispatcher (core/sink_registry.hpp,
// SinkFactory). A new kind of sink is one more branch in each function here
// (sinks/README.md); the catalog functions and the publisher ask only these.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/message_format.hpp"
#include "core/sink.hpp"

namespace outbox {

// Every kind outbox knows ("kafka", "redis", "amqp", "nats", "mqtt",
// "http"), whether this
// build has its client library or not (outbox.sinks' CHECK lists the same).
bool IsSinkKind(std::string_view kind);

// Whether this build has the kind's client library (the AMQP, NATS, MQTT
// and HTTP sinks are built only when pkg-config finds theirs: the Makefile).
bool SinkKindBuilt(std::string_view kind);

// The known kinds for an error's hint: "'kafka', 'redis', ... or 'http'".
const char *SinkKindList();

// The client library a kind's sink is built with, and its Debian package,
// for an error's hint: "librabbitmq (librabbitmq-dev)".
const char *SinkKindLibrary(std::string_view kind);

// Why options are refused for a sink of `kind`: a value from the
// environment a superuser did not give (core/sink_option.hpp), then the
// kind's own validation, which connects to nothing; nothing when valid. A
// kind this build lacks is refused here too.
std::optional<std::string> ValidateSinkOptions(std::string_view kind, const SinkOptions &options,
                                               bool privileged);

// Why `target` cannot be a route's target on a sink of `kind` (a sentence
// for an error's detail); nothing when it can. A route without a target
// sends to the event's topic, which is checked only when it is sent.
std::optional<std::string> CheckRouteTarget(std::string_view kind, std::string_view target);

// Why a route to a sink of `kind` cannot use `format`; nothing when it can.
std::optional<std::string> CheckRouteFormat(std::string_view kind, MessageFormat format);

// A sink of `kind` named `name`, from create_sink() options; nullptr with
// *error set when the options are refused (ValidateSinkOptions' reasons) or
// the kind is unknown or not built. `privileged`: the options are a
// superuser's (SinkRow).
std::unique_ptr<Sink> MakeSink(std::string_view name, std::string_view kind,
                               const SinkOptions &options, bool privileged, std::string *error);

}  // namespace outbox
