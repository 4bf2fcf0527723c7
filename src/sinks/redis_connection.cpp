// The Redis sink's connection: connecting without blocking (TCP, then AUTH,
// SELECT and CLIENT SETNAME in one round trip), noticing a connection the
// server closed, reading what the socket holds, and dropping the connection.
// The exchange of a pipeline's commands and replies, which Connect uses too,
// is RedisSink::Exchange (redis_sink_class.hpp). Runs on the owner's thread
// only; every wait is bounded (redis_sink_class.hpp says how).
#include "sinks/redis_sink_class.hpp"
#include "sinks/redis_replies.hpp"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

namespace {

// TCP connect, from the first attempt until the socket is connected. Name
// resolution (getaddrinfo inside hiredis) comes before and is not bounded.
constexpr int kConnectTimeoutMs = 2000;
// Bytes read from the socket at a time.
constexpr size_t kReadChunk = size_t{16} * 1024;

}  // namespace

std::string RedisSink::ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the message, which need not be in buf.
  const char *text = strerror_r(err, buf, sizeof buf);
  return text != nullptr ? std::string(text) : std::to_string(err);
}

RedisSink::Stop RedisSink::Connect(InterruptCheck interrupted, std::string *error) {
  const std::string prefix = "cannot connect to " + endpoint_ + ": ";
  context_ = redisConnectNonBlock(options_.host.c_str(), options_.port);
  if (context_ == nullptr) throw std::bad_alloc();  // hiredis's only reason for no context
  if (context_->err != 0) {
    *error = prefix + context_->errstr;
    return Stop::kFailed;
  }
  Stop stop = WaitConnected(interrupted, error);
  if (stop != Stop::kNone) {
    if (stop == Stop::kFailed) *error = prefix + *error;
    return stop;
  }
  // hiredis sets TCP_NODELAY only on connections it waited for itself. Small
  // batches must not wait for the previous one's acknowledgement.
  const int yes = 1;
  static_cast<void>(setsockopt(context_->fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes));
  // Lets a silently vanished server show up as an error on an idle connection.
  if (redisEnableKeepAlive(context_) != REDIS_OK) {
    *error = prefix + context_->errstr;
    return Stop::kFailed;
  }

  // One round trip: AUTH, SELECT and CLIENT SETNAME, pipelined. Without a
  // password, CLIENT SETNAME's answer is what reveals that one is needed.
  const std::string db = std::to_string(options_.db);
  size_t count = 0;
  std::optional<size_t> auth_at;
  std::optional<size_t> select_at;
  if (options_.password) {
    const char *argv[] = {"AUTH", options_.password->c_str()};
    const size_t lengths[] = {4, options_.password->size()};
    if (redisAppendCommandArgv(context_, 2, argv, lengths) != REDIS_OK) throw std::bad_alloc();
    auth_at = count++;
  }
  if (options_.db != 0) {
    const char *argv[] = {"SELECT", db.c_str()};
    const size_t lengths[] = {6, db.size()};
    if (redisAppendCommandArgv(context_, 2, argv, lengths) != REDIS_OK) throw std::bad_alloc();
    select_at = count++;
  }
  {
    const char *argv[] = {"CLIENT", "SETNAME", client_name_.c_str()};
    const size_t lengths[] = {6, 7, client_name_.size()};
    if (redisAppendCommandArgv(context_, 3, argv, lengths) != REDIS_OK) throw std::bad_alloc();
    ++count;
  }
  std::string refused;
  stop = Exchange(
      count, interrupted,
      [&](size_t i, const redisReply &reply) {
        if (reply.type != REDIS_REPLY_ERROR || !refused.empty()) return;
        const std::string_view text = ReplyText(reply);
        if (auth_at && i == *auth_at) {
          refused = "authentication failed: ";
        } else if (select_at && i == *select_at) {
          refused = "cannot select db " + db + ": ";
        } else if (ClassifyRedisError(text) == DeliveryStatus::kRejected) {
          // CLIENT SETNAME refused as such (an old server, an ACL without
          // +client): a name is only a courtesy to whoever runs CLIENT LIST.
          AddLog(LogLevel::kDebug, "CLIENT SETNAME refused: " + std::string(text));
          return;
        }
        // Otherwise the server refuses the connection itself: NOAUTH when a
        // password is needed and none is set, "max number of clients", ...
        refused.append(text.data(), text.size());
      },
      error);
  if (stop == Stop::kFailed) *error = prefix + *error;
  if (stop != Stop::kNone) return stop;
  if (!refused.empty()) {
    *error = prefix + refused;
    return Stop::kFailed;
  }
  return Stop::kNone;
}

RedisSink::Stop RedisSink::WaitConnected(InterruptCheck interrupted, std::string *error) {
  const Clock::time_point deadline = Clock::now() + Millis(kConnectTimeoutMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) {
      *error = "timed out after " + std::to_string(kConnectTimeoutMs) + " ms";
      return Stop::kFailed;
    }
    pollfd p{context_->fd, POLLOUT, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<long long>(kWaitSliceMs, left)));
    if (ready < 0 && errno != EINTR) {
      *error = "poll: " + ErrnoText(errno);
      return Stop::kFailed;
    }
    if (ready > 0) {
      int so_error = 0;
      socklen_t size = sizeof so_error;
      if (getsockopt(context_->fd, SOL_SOCKET, SO_ERROR, &so_error, &size) != 0) so_error = errno;
      if (so_error == 0) return Stop::kNone;
      *error = ErrnoText(so_error);
      return Stop::kFailed;
    }
    if (interrupted != nullptr && interrupted()) return Stop::kInterrupted;
  }
}

// True unless the idle connection has become readable: end of stream after
// the server closed it, an error, or data nobody asked for.
bool RedisSink::StillOpen() const {
  pollfd p{context_->fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, 0);
  } while (ready < 0 && errno == EINTR);
  return ready == 0;
}

// Moves what the socket holds into hiredis's reader: the number of bytes
// read (0 when none were waiting), or -1 with *error at end of stream or on
// an error. hiredis's redisBufferRead would refuse to read once a write has
// failed, and replies may still be waiting then.
int RedisSink::Feed(std::string *error) {
  char buf[kReadChunk];
  ssize_t got;
  do {
    got = recv(context_->fd, buf, sizeof buf, MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got > 0) {
    if (redisReaderFeed(context_->reader, buf, static_cast<size_t>(got)) != REDIS_OK) {
      *error = std::string("protocol error: ") + context_->reader->errstr;
      return -1;
    }
    return static_cast<int>(got);
  }
  if (got == 0) {
    *error = "the server closed the connection";
    return -1;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
  *error = ErrnoText(errno);
  return -1;
}

void RedisSink::Disconnect() noexcept {
  if (context_ == nullptr) return;
  redisFree(context_);
  context_ = nullptr;
}

}  // namespace outbox
