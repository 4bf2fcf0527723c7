// The Redis sink: one hiredis connection, used only from the owner's thread.
//
// The connection is non-blocking and every wait is a poll() of at most
// kWaitSliceMs, so `interrupted` is checked about every 100 ms even while
// connecting, and no wait outlasts kConnectTimeoutMs or kIoTimeoutMs without
// progress. hiredis's blocking calls (redisConnectWithTimeout, redisSetTimeout,
// redisGetReply) bound each system call with a socket timeout but cannot be
// interrupted, so hiredis here only formats commands (redisAppendCommandArgv:
// binary-safe, nothing of the user's is ever formatted into a command string),
// writes them (redisBufferWrite) and parses replies (redisReader).
//
// A batch is pipelined: its commands are appended, then bytes are written
// and replies read as the socket allows, reply i belonging to message i; one
// round trip unless the batch exceeds kMaxPipelineBytes.
// After any I/O error, timeout or interruption the context is freed (hiredis
// cannot tell which late reply belongs to which command): what had no reply
// yet is kRetriable, and may or may not have been applied (at least once).
//
// Per-key order: a pipeline carries at most one message of each target and
// key. The second message of a key goes in the next round, once every reply
// of the round before has come, and only if the first was applied: a later
// message never reaches Redis while an earlier one of its key failed. Redis
// answers a pipeline's commands one by one, and a passing state of the server
// (BUSY while another client's script runs, LOADING, OOM at the maxmemory
// edge) can refuse the first commands and apply the ones after it; in one
// pipeline that put a key's second event ahead of its first (red team, TAP
// 952). A message held back so is kNotSent. A batch of distinct keys is one
// round, a batch of one hot key one round per message.
#include "sinks/redis_sink.hpp"
#include "sinks/sink_options.hpp"
#include "core/log_buffer.hpp"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
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

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// TCP connect, from the first attempt until the socket is connected. Name
// resolution (getaddrinfo inside hiredis) comes before and is not bounded.
constexpr int kConnectTimeoutMs = 2000;
// Longest time without a byte written or read while commands await replies:
// a server that stops answering for this long is taken as down.
constexpr int kIoTimeoutMs = 2000;
// Longest single wait, so `interrupted` is checked this often.
constexpr int kWaitSliceMs = 100;
// Bytes read from the socket at a time.
constexpr size_t kReadChunk = size_t{16} * 1024;
// A batch is sent in pipelines of about this many bytes (one message more at most).
constexpr size_t kMaxPipelineBytes = size_t{4} * 1024 * 1024;
// Shorter passwords are not masked in log and error text: they could not be
// told apart from ordinary words. Redis never echoes a password anyway; the
// masking only guards against a text we did not foresee.
constexpr size_t kMinMaskedPassword = 4;

// hiredis copies argv with memcpy: an empty view passes NonNull's pointer
// (core/sink.hpp).

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The error code of an error reply: its first word ("WRONGTYPE", "ERR").
std::string_view ErrorCode(std::string_view reply) { return reply.substr(0, reply.find(' ')); }

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the message, which need not be in buf.
  const char *text = strerror_r(err, buf, sizeof buf);
  return text != nullptr ? std::string(text) : std::to_string(err);
}

struct ReplyDeleter {
  void operator()(redisReply *reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

std::string_view ReplyText(const redisReply &reply) {
  if (reply.str == nullptr) return std::string_view();
  return std::string_view(reply.str, reply.len);
}

// Writing to a connection the server has closed raises SIGPIPE, whose default
// action ends the process. PostgreSQL's processes ignore it, but a sink must
// not rely on its owner: as libpq does, SIGPIPE is blocked in this thread
// while we do I/O, and one that our writes raised is consumed before the old
// mask returns.
class SigpipeGuard {
 public:
  SigpipeGuard() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
    was_pending_ = Pending();
  }
  ~SigpipeGuard() {
    if (!blocked_) return;
    if (!was_pending_ && Pending()) {
      const int saved = errno;
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
      errno = saved;
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard &) = delete;
  SigpipeGuard &operator=(const SigpipeGuard &) = delete;

 private:
  static bool Pending() {
    sigset_t pending;
    sigemptyset(&pending);
    return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }

  sigset_t pipe_;
  sigset_t old_;
  bool blocked_ = false;
  bool was_pending_ = false;
};

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
  // call have message i's target and key; keyless messages all go first.
  std::vector<uint32_t> round(n, 0);
  uint32_t rounds = 1;
  {
    std::map<std::pair<std::string_view, std::string_view>, uint32_t> seen;
    for (size_t i = 0; i < n; ++i) {
      if (!messages[i].has_key) continue;
      round[i] = seen[{messages[i].target, messages[i].key}]++;
      rounds = std::max(rounds, round[i] + 1);
    }
  }
  // Keys with a message that was not applied: their later messages wait.
  std::set<std::pair<std::string_view, std::string_view>> failed_keys;
  auto key_of = [&](size_t i) { return std::make_pair(messages[i].target, messages[i].key); };

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

// Writes what hiredis holds and reads `count` replies, calling
// on_reply(i, reply) for reply i in order. kNone when all came; otherwise
// *error says why (kFailed) and the context must be dropped. Replies the
// server sent before closing are still handed over.
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
