// How the Redis sink judges Redis's error replies: whether the command was
// refused for itself, or the server (or this connection to it) is in a state
// that passes. Plain functions of the reply's text, so that their table is
// tested on its own (test/unit/redis_sink_test.cpp). No PostgreSQL header
// here, and no hiredis one.
#pragma once

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

}  // namespace outbox
