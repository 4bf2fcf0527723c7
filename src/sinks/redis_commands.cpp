// The Redis sink's command for one message, per mode: XADD to a stream
// (with MAXLEN ~ when set), PUBLISH to a channel, RPUSH to a list. Appended
// to hiredis's output buffer, not sent: RedisSink::Exchange sends it.
#include "sinks/redis_sink_class.hpp"

#include "core/message_format.hpp"

#include <hiredis/hiredis.h>

#include <string_view>

namespace outbox {

// hiredis copies argv with memcpy: an empty view passes NonNull's pointer
// (core/sink.hpp).
bool RedisSink::AppendCommand(const OutMessage &message) {
  // As many arguments as the format has fields: a Debezium entry has one
  // per user header.
  argv_.clear();
  lengths_.clear();
  auto add = [&](std::string_view arg) {
    argv_.push_back(NonNull(arg));
    lengths_.push_back(arg.size());
  };
  if (options_.mode == RedisOptions::Mode::kStream) {
    add("XADD");
    add(message.target);
    if (options_.maxlen) {
      add("MAXLEN");
      add("~");  // trim whole nodes only: much cheaper than an exact length
      add(maxlen_text_);
    }
    // Redis assigns entry ids: ids derived from ours would be refused when
    // events commit out of id order (facts: never derive stream ids).
    add("*");
    // The fields' views point into message or envelope_ (untouched until
    // the command is formatted below).
    RedisStreamFields(message, &envelope_, &fields_);
    for (std::string_view field : fields_) add(field);
  } else {
    envelope_.clear();
    AppendRedisBody(message, &envelope_);
    add(options_.mode == RedisOptions::Mode::kPublish ? "PUBLISH" : "RPUSH");
    add(message.target);
    add(envelope_);
  }
  return redisAppendCommandArgv(context_, static_cast<int>(argv_.size()), argv_.data(),
                                lengths_.data()) == REDIS_OK;
}

}  // namespace outbox
