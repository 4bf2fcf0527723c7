// The AMQP 0-9-1 sink (RabbitMQ, librabbitmq), and the details of it that
// its unit tests check directly (its judgement of the broker's refusals:
// amqp_errors.hpp; which user headers it leaves out). No PostgreSQL header
// here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/sink.hpp"
#include "sinks/amqp_errors.hpp"  // JudgeAmqpChannelClose, JudgeAmqpReturn, ParseAmqpSizeRefusal

namespace outbox {

// Build an AMQP sink from create_sink() options (ParseAmqpOptions). It
// connects lazily, on the first Publish, and again after any connection
// error. Returns nullptr and sets *error when the options are invalid.
std::unique_ptr<Sink> MakeAmqpSink(const std::string &name, const SinkOptions &options,
                                   std::string *error);

// Whether a user header stays out of the headers table because RabbitMQ
// gives its name a meaning: CC and BCC in any case (sender-selected
// distribution), and names starting with "x-" (dead lettering, delays,
// deduplication, federation; RabbitMQ reads the prefix in lower case only).
bool AmqpDropsHeader(std::string_view name);

// The AMQP timestamp property (seconds since 1970) of a timestamptz
// (microseconds since 2000-01-01), rounded down.
int64_t AmqpTimestamp(int64_t pg_timestamp_us);

}  // namespace outbox
