// The Redis sink (hiredis), and the details of it that its unit tests check
// directly (its judgement of error replies: redis_replies.hpp). No
// PostgreSQL header here.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/sink.hpp"
#include "sinks/redis_replies.hpp"  // ClassifyRedisError, RedisErrorConcernsConnection

namespace outbox {

// Build a Redis sink from create_sink() options (ParseRedisOptions). It
// connects lazily, on the first Publish, and again after any connection
// error. Returns nullptr and sets *error when the options are invalid.
std::unique_ptr<Sink> MakeRedisSink(const std::string &name, const SinkOptions &options,
                                    std::string *error);

}  // namespace outbox
