// The Redis sink's class: one hiredis connection, used only from the owner's
// thread (hiredis runs no thread of its own). Private to the Redis sink's
// files: redis_sink.cpp publishes batches, redis_connection.cpp connects and
// moves bytes, redis_commands.cpp builds each mode's command. Everything
// else sees only redis_sink.hpp.
//
// The connection is non-blocking and every wait is a poll() of at most
// kWaitSliceMs, so `interrupted` is checked about every 100 ms even while
// connecting, and no wait outlasts kConnectTimeoutMs or kIoTimeoutMs without
// progress. hiredis's blocking calls (redisConnectWithTimeout, redisSetTimeout,
// redisGetReply) bound each system call with a socket timeout but cannot be
// interrupted, so hiredis here only formats commands (redisAppendCommandArgv:
// binary-safe, nothing of the user's is ever formatted into a command string),
// writes them (redisBufferWrite) and parses replies (redisReader).
#pragma once

#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/log_buffer.hpp"
#include "core/sink.hpp"
#include "sinks/sink_options.hpp"

namespace outbox {

class RedisSink final : public Sink {
 public:
  RedisSink(const std::string &name, RedisOptions options);
  ~RedisSink() override { Disconnect(); }
  RedisSink(const RedisSink &) = delete;
  RedisSink &operator=(const RedisSink &) = delete;

  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override;
  void Poll() override {}
  std::vector<LogLine> TakeLogs() override;
  bool NeedsRecreate() const override { return false; }  // it reconnects by itself
  std::string State() const override;

 private:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  // Longest time without a byte written or read while commands await replies:
  // a server that stops answering for this long is taken as down.
  static constexpr int kIoTimeoutMs = 2000;
  // Longest single wait, so `interrupted` is checked this often.
  static constexpr int kWaitSliceMs = 100;

  struct ReplyDeleter {
    void operator()(redisReply *reply) const { freeReplyObject(reply); }
  };
  using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

  static std::string_view ReplyText(const redisReply &reply) {
    if (reply.str == nullptr) return std::string_view();
    return std::string_view(reply.str, reply.len);
  }
  static std::string ErrnoText(int err);

  // What the latest evidence says about the server (see State()).
  enum class Connection { kIdle, kConnected, kDown };
  // Why an exchange with the server ended before every reply came.
  enum class Stop { kNone, kFailed, kInterrupted };

  void PublishBatch(const OutMessage *messages, size_t n, Delivery *out,
                    InterruptCheck interrupted);
  Stop Connect(InterruptCheck interrupted, std::string *error);
  Stop WaitConnected(InterruptCheck interrupted, std::string *error);
  bool StillOpen() const;
  bool AppendCommand(const OutMessage &message);
  template <typename OnReply>
  Stop Exchange(size_t count, InterruptCheck interrupted, OnReply &&on_reply, std::string *error);
  int Feed(std::string *error);
  void Disconnect() noexcept;
  void NoteDown(const std::string &reason);
  void FailRest(Delivery *out, size_t n, const std::string &reason) noexcept;
  std::string Masked(std::string text) const;
  void AddLog(LogLevel level, std::string text) noexcept;

  const std::string client_name_;
  const RedisOptions options_;
  const std::string endpoint_;     // "host:port", for messages
  const std::string maxlen_text_;  // XADD's MAXLEN argument, when set
  redisContext *context_ = nullptr;
  Connection connection_ = Connection::kIdle;
  std::string last_failure_;              // while down: the reason last logged as a warning
  std::vector<bool> settled_;             // Publish: which out[i] have their outcome
  std::string envelope_;                  // reused for each message's envelope
  std::vector<std::string_view> fields_;  // reused for each message's stream fields
  std::vector<const char *> argv_;        // reused for each command's arguments
  std::vector<size_t> lengths_;           // and their lengths
  LogBuffer logs_{"Redis sink log line(s)"};
};

// Writes what hiredis holds and reads `count` replies, calling
// on_reply(i, reply) for reply i in order. kNone when all came; otherwise
// *error says why (kFailed) and the context must be dropped. Replies the
// server sent before closing are still handed over. A template (each caller
// hands its own reply handler), so it is defined here for both callers:
// Connect (redis_connection.cpp) and PublishBatch (redis_sink.cpp).
template <typename OnReply>
RedisSink::Stop RedisSink::Exchange(size_t count, InterruptCheck interrupted, OnReply &&on_reply,
                                    std::string *error) {
  redisReader *reader = context_->reader;
  size_t got = 0;
  // Hands over every complete reply in the reader; false on a protocol error.
  auto parse = [&]() {
    while (got < count) {
      void *raw = nullptr;
      if (redisReaderGetReply(reader, &raw) != REDIS_OK) {
        *error = std::string("protocol error: ") + reader->errstr;
        return false;
      }
      if (raw == nullptr) break;
      const ReplyPtr reply(static_cast<redisReply *>(raw));
      on_reply(got, *reply);
      ++got;
    }
    return true;
  };
  // After an error, whatever the server managed to send before it.
  auto salvage = [&]() {
    std::string ignored;
    while (got < count && Feed(&ignored) > 0) {
      if (!parse()) break;
    }
  };

  Clock::time_point progress = Clock::now();
  Clock::time_point checked = progress;
  bool sending = true;
  for (;;) {
    if (!parse()) return Stop::kFailed;
    if (got == count) return Stop::kNone;
    const Clock::time_point now = Clock::now();
    if (interrupted != nullptr && now - checked >= Millis(kWaitSliceMs)) {
      checked = now;
      if (interrupted()) return Stop::kInterrupted;
    }
    const auto left = kIoTimeoutMs - std::chrono::duration_cast<Millis>(now - progress).count();
    if (left <= 0) {
      *error = "no answer within " + std::to_string(kIoTimeoutMs) + " ms";
      return Stop::kFailed;
    }
    pollfd p{context_->fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<long long>(kWaitSliceMs, left)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      *error = "poll: " + ErrnoText(errno);
      return Stop::kFailed;
    }
    if (ready == 0) {
      if (interrupted != nullptr) {
        checked = Clock::now();
        if (interrupted()) return Stop::kInterrupted;
      }
      continue;
    }
    // Read before writing: replies already here must not be lost to a
    // failed write.
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const int fed = Feed(error);
      if (fed < 0) {
        if (parse()) salvage();
        return Stop::kFailed;
      }
      if (fed > 0) progress = Clock::now();
    }
    if (sending && (p.revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      int done = 0;
      if (redisBufferWrite(context_, &done) != REDIS_OK) {
        *error = std::string("cannot send: ") + context_->errstr;
        if (parse()) salvage();
        return Stop::kFailed;
      }
      sending = done == 0;
      progress = Clock::now();
    }
  }
}

}  // namespace outbox
