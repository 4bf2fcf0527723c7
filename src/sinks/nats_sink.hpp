// The NATS JetStream sink (libnats), and the details of it that its unit
// tests check directly: its options and subjects (nats_options.hpp), its
// headers (nats_headers.hpp) and its judgement of JetStream's answers
// (nats_replies.hpp). No PostgreSQL header here.
#pragma once

#include <memory>
#include <string>

#include "core/sink.hpp"
#include "sinks/nats_headers.hpp"  // ClassifyNatsHeader, NatsHeaders
#include "sinks/nats_options.hpp"  // ParseNatsOptions, CheckNatsSubject
#include "sinks/nats_replies.hpp"  // ParseJetStreamReply, ClassifyJetStreamError

namespace outbox {

// Build a NATS sink from create_sink() options (ParseNatsOptions). It
// connects lazily, on the first Publish; libnats reconnects after a loss.
// Returns nullptr and sets *error when the options are invalid.
std::unique_ptr<Sink> MakeNatsSink(const std::string &name, const SinkOptions &options,
                                   std::string *error);

}  // namespace outbox
