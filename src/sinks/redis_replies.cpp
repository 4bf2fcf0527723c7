// The Redis sink's judgement of error replies (redis_replies.hpp).
#include "sinks/redis_replies.hpp"

#include <string_view>

namespace outbox {

namespace {

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The error code of an error reply: its first word ("WRONGTYPE", "ERR").
std::string_view ErrorCode(std::string_view reply) { return reply.substr(0, reply.find(' ')); }

}  // namespace

DeliveryStatus ClassifyRedisError(std::string_view reply) {
  const std::string_view code = ErrorCode(reply);
  // The key holds another type, or the user may not touch it: every command
  // on that key fails the same way until someone changes it.
  if (code == "WRONGTYPE" || code == "NOPERM") return DeliveryStatus::kRejected;
  if (code == "ERR") {
    // ERR mostly refuses the command's arguments; a protocol error comes
    // from what we sent (an argument over proto-max-bulk-len). These ERR
    // texts describe the server instead.
    if (StartsWith(reply, "ERR unknown command") ||
        StartsWith(reply, "ERR max number of clients")) {
      return DeliveryStatus::kRetriable;
    }
    return DeliveryStatus::kRejected;
  }
  // LOADING, BUSY, OOM, MASTERDOWN, READONLY, TRYAGAIN, CLUSTERDOWN,
  // NOREPLICAS, MISCONF, MOVED, ASK, NOAUTH, WRONGPASS and codes we do not
  // know: states of the server or of our connection, which an event must not
  // die of. (Redis names states with codes of their own; refusals of a
  // command mostly say ERR.)
  return DeliveryStatus::kRetriable;
}

bool RedisErrorConcernsConnection(std::string_view reply) {
  const std::string_view code = ErrorCode(reply);
  return code == "READONLY" || code == "MASTERDOWN" || code == "NOAUTH" || code == "WRONGPASS" ||
         code == "MOVED" || code == "ASK";
}

}  // namespace outbox
