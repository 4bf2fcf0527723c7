// The Redis sink: a batch of messages, sent over one hiredis connection
// (redis_connection.cpp) as pipelines of commands (redis_commands.cpp), each
// reply judged by redis_replies.*. The class is in redis_sink_class.hpp.
//
// A batch is pipelined: its commands are appended, then bytes are written
// and replies read as the socket allows, reply i belonging to message i; one
// round trip unless the batch exceeds kMaxPipelineBytes.
// After any I/O error, timeout or interruption the context is freed (hiredis
// cannot tell which late reply belongs to which command): what had no reply
// yet is kRetriable, and may or may not have been applied (at least once).
//
// Per-key order: a pipeline carries at most one message of each route and
// key (of any target). The second message of a key goes in the next round, once every reply
// of the round before has come, and only if the first was applied: a later
// message never reaches Redis while an earlier one of its key failed. Redis
// answers a pipeline's commands one by one, and a passing state of the server
// (BUSY while another client's script runs, LOADING, OOM at the maxmemory
// edge) can refuse the first commands and apply the ones after it; in one
// pipeline that put a key's second event ahead of its first (TAP 033 shows
// it). A message held back so is kNotSent. A batch of distinct keys is one
// round, a batch of one hot key one round per message.
#include "sinks/redis_sink.hpp"
#include "sinks/redis_sink_class.hpp"
#include "sinks/redis_replies.hpp"
#include "sinks/sigpipe_guard.hpp"
#include "sinks/sink_options.hpp"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox {

namespace {

// A batch is sent in pipelines of about this many bytes (one message more at most).
constexpr size_t kMaxPipelineBytes = size_t{4} * 1024 * 1024;
// Shorter passwords are not masked in log and error text: they could not be
// told apart from ordinary words. Redis never echoes a password anyway; the
// masking only guards against a text we did not foresee.
constexpr size_t kMinMaskedPassword = 4;

// CLIENT SETNAME accepts only characters '!' to '~'; sink names are
// [A-Za-z0-9._-] already, this only makes sure.
std::string ClientName(const std::string &name) {
  std::string client = "outbox-" + name;
  for (char &c : client) {
    if (c < '!' || c > '~') c = '_';
  }
  return client;
}

std::string Endpoint(const RedisOptions &options) {
  const bool ipv6 = options.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + options.host + "]" : options.host) + ":" + std::to_string(options.port);
}

}  // namespace

RedisSink::RedisSink(const std::string &name, RedisOptions options)
    : client_name_(ClientName(name)),
      options_(std::move(options)),
      endpoint_(Endpoint(options_)),
      maxlen_text_(options_.maxlen ? std::to_string(*options_.maxlen) : std::string()) {}

void RedisSink::Publish(const OutMessage *messages, size_t n, Delivery *out,
                        InterruptCheck interrupted) {
  if (n == 0) return;
  SigpipeGuard sigpipe_guard;
  try {
    settled_.assign(n, false);
  } catch (const std::bad_alloc &) {
    for (size_t i = 0; i < n; ++i) out[i].status = DeliveryStatus::kRetriable;
    return;
  }
  try {
    PublishBatch(messages, n, out, interrupted);
  } catch (const std::bad_alloc &) {
    // Commands may wait in hiredis's buffer or replies on the socket:
    // the context could never be matched up again.
    Disconnect();
    FailRest(out, n, "out of memory");
  } catch (...) {
    Disconnect();
    FailRest(out, n, "unexpected error");  // only `interrupted` could throw anything else
  }
}

void RedisSink::PublishBatch(const OutMessage *messages, size_t n, Delivery *out,
                             InterruptCheck interrupted) {
  if (interrupted != nullptr && interrupted()) {
    FailRest(out, n, "interrupted");
    return;
  }
  // A server that restarted, or closed an idle connection, has left the
  // socket readable (end of stream). Sending a batch into it would only
  // fail it, so connect afresh first.
  if (context_ != nullptr && !StillOpen()) {
    AddLog(LogLevel::kInfo, "the connection to " + endpoint_ + " was closed; reconnecting");
    Disconnect();
  }
  if (context_ == nullptr) {
    std::string error;
    const Stop stop = Connect(interrupted, &error);
    if (stop != Stop::kNone) {
      Disconnect();
      if (stop == Stop::kInterrupted) {
        FailRest(out, n, "interrupted");
      } else {
        error = Masked(std::move(error));
        NoteDown(error);
        FailRest(out, n, error);
      }
      return;
    }
    connection_ = Connection::kConnected;
    last_failure_.clear();
    AddLog(LogLevel::kInfo, "connected to " + endpoint_ + " db " + std::to_string(options_.db));
  }

  // Rounds (see the header): round[i] is how many earlier messages of this
  // call have message i's route and key, whatever their targets (a route
  // without a target sends a key's events to several streams); keyless
  // messages all go first.
  std::vector<uint32_t> round(n, 0);
  uint32_t rounds = 1;
  {
    std::map<ChainKey, uint32_t> seen;
    for (size_t i = 0; i < n; ++i) {
      if (!messages[i].has_key) continue;
      round[i] = seen[ChainOf(messages[i])]++;
      rounds = std::max(rounds, round[i] + 1);
    }
  }
  // Keys with a message that was not applied: their later messages wait.
  std::set<ChainKey> failed_keys;
  auto key_of = [&](size_t i) { return ChainOf(messages[i]); };

  // When the connection fails in round r, the messages of later rounds were
  // never sent: they wait (kNotSent) without being charged an attempt.
  auto hold_later_rounds = [&](uint32_t r, const std::string &why) {
    for (size_t i = 0; i < n; ++i) {
      if (settled_[i] || round[i] <= r) continue;
      out[i].status = DeliveryStatus::kNotSent;
      out[i].error = "not sent: " + why;
      settled_[i] = true;
    }
  };
  std::optional<std::string> drop_reason;
  std::vector<size_t> todo;
  uint32_t r = 0;
  for (; r < rounds && !drop_reason; ++r) {
    todo.clear();
    for (size_t i = 0; i < n; ++i) {
      if (round[i] != r) continue;
      if (messages[i].has_key && failed_keys.count(key_of(i)) != 0) {
        out[i].status = DeliveryStatus::kNotSent;
        out[i].error = "held back: an earlier event of its key failed in this batch";
        settled_[i] = true;
        continue;
      }
      todo.push_back(i);
    }
    // Pipelines of at most kMaxPipelineBytes, one after the other on this
    // connection: a round of ordinary size is a single round trip, and a
    // huge one does not need all of its commands in memory twice, nor all
    // of its replies queued in Redis.
    for (size_t start = 0; start < todo.size() && !drop_reason;) {
      size_t end = start;
      while (end < todo.size() && (end == start || sdslen(context_->obuf) < kMaxPipelineBytes)) {
        if (!AppendCommand(messages[todo[end]])) {
          // hiredis fails to append only when it runs out of memory.
          const std::string error = std::string("cannot queue a command: ") + context_->errstr;
          Disconnect();
          FailRest(out, n, error);
          return;
        }
        ++end;
      }
      std::string error;
      const Stop stop = Exchange(
          end - start, interrupted,
          [&](size_t j, const redisReply &reply) {
            const size_t i = todo[start + j];
            Delivery &delivery = out[i];
            if (reply.type == REDIS_REPLY_ERROR) {
              const std::string_view text = ReplyText(reply);
              delivery.status = ClassifyRedisError(text);
              delivery.error.assign(text.data(), text.size());
              if (messages[i].has_key) failed_keys.insert(key_of(i));
              if (!drop_reason && RedisErrorConcernsConnection(text)) drop_reason.emplace(text);
            } else {
              // XADD's entry id, RPUSH's list length, PUBLISH's receiver count
              // (zero receivers is still a delivery: pub/sub keeps nothing).
              delivery.status = DeliveryStatus::kDelivered;
              delivery.error.clear();
            }
            settled_[i] = true;
          },
          &error);
      if (stop == Stop::kInterrupted) {
        // Not the server's fault: the next batch simply connects again.
        Disconnect();
        connection_ = Connection::kIdle;
        FailRest(out, n, "interrupted");
        return;
      }
      if (stop == Stop::kFailed) {
        Disconnect();
        error = Masked("connection to " + endpoint_ + " lost: " + error);
        NoteDown(error);
        hold_later_rounds(r, error);
        FailRest(out, n, error);
        return;
      }
      start = end;
    }
  }
  if (drop_reason) {
    Disconnect();
    const std::string reason = "disconnected from " + endpoint_ + " after \"" + *drop_reason + '"';
    NoteDown(reason);
    hold_later_rounds(r - 1, reason);  // the loop stopped after round r - 1
    FailRest(out, n, reason);          // later pipelines would have met the same answer
  }
}
// The server is unreachable or unusable: one warning per distinct reason,
// repeats (the publisher retries a down sink after backing off) at debug.
void RedisSink::NoteDown(const std::string &reason) {
  const bool repeat = connection_ == Connection::kDown && reason == last_failure_;
  connection_ = Connection::kDown;
  AddLog(repeat ? LogLevel::kDebug : LogLevel::kWarning, reason);
  if (!repeat) last_failure_ = reason;
}

void RedisSink::FailRest(Delivery *out, size_t n, const std::string &reason) noexcept {
  for (size_t i = 0; i < n; ++i) {
    if (i < settled_.size() && settled_[i]) continue;
    out[i].status = DeliveryStatus::kRetriable;
    try {
      out[i].error = reason;
    } catch (...) {
      out[i].error.clear();
    }
  }
  settled_.assign(settled_.size(), true);
}

std::string RedisSink::Masked(std::string text) const {
  if (!options_.password || options_.password->size() < kMinMaskedPassword) return text;
  const std::string &password = *options_.password;
  for (size_t at = text.find(password); at != std::string::npos; at = text.find(password, at + 3)) {
    text.replace(at, password.size(), "***");
  }
  return text;
}

void RedisSink::AddLog(LogLevel level, std::string text) noexcept {
  try {
    logs_.Add(level, Masked(std::move(text)));
  } catch (...) {
    logs_.CountDropped(1);
  }
}

std::vector<LogLine> RedisSink::TakeLogs() { return logs_.Take(); }

// "idle" before the first connection and after an interrupted batch,
// "connected" while a connection is believed usable, "down" after a failure
// until a connection succeeds again.
std::string RedisSink::State() const {
  switch (connection_) {
    case Connection::kConnected:
      return "connected";
    case Connection::kDown:
      return "down";
    case Connection::kIdle:
      break;
  }
  return "idle";
}

std::unique_ptr<Sink> MakeRedisSink(const std::string &name, const SinkOptions &options,
                                    std::string *error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  try {
    // The same checks create_sink() made, so both agree on what is valid.
    RedisOptions parsed;
    if (std::optional<std::string> invalid = ParseRedisOptions(options, &parsed)) {
      *error = std::move(*invalid);
      return nullptr;
    }
    return std::make_unique<RedisSink>(name, std::move(parsed));
  } catch (...) {
    DescribeCurrentException(error);
  }
  return nullptr;
}

}  // namespace outbox
