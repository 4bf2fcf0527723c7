// The Redis sink (hiredis) and the details of it that its unit tests check
// directly. No PostgreSQL header here.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/sink.hpp"

namespace outbox {

// How the publisher should treat Redis's error reply to one command, e.g.
// "WRONGTYPE Operation against a key holding the wrong kind of value":
// kRejected when the command itself (its key or arguments) is refused
// (WRONGTYPE, NOPERM, a generic ERR, a protocol error caused by what was
// sent); kRetriable when the server is in a state that may pass (LOADING,
// BUSY, OOM, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, MISCONF, ...), when
// the connection is not allowed to write (NOAUTH, WRONGPASS: a configuration
// problem of the sink, not of the event), and for codes we do not know.
DeliveryStatus ClassifyRedisError(std::string_view reply);

// True for error replies that say this connection is the wrong one to keep
// (READONLY: we reached a replica, e.g. after a failover; MASTERDOWN; NOAUTH;
// MOVED/ASK: a cluster node): the sink drops it and connects afresh.
bool RedisErrorConcernsConnection(std::string_view reply);

// Build a Redis sink from create_sink() options (ParseRedisOptions). It
// connects lazily, on the first Publish, and again after any connection
// error. Returns nullptr and sets *error when the options are invalid.
std::unique_ptr<Sink> MakeRedisSink(const std::string &name, const SinkOptions &options,
                                    std::string *error);

}  // namespace outbox
