// The AMQP sink's connection: a TCP connect of our own (non-blocking, so
// that it is sliced like every other wait) or librabbitmq's TLS socket, the
// AMQP handshake read frame by frame (PLAIN authentication, tuning, the
// virtual host), a channel in confirm mode, what the broker says on channel
// 0 (connection.close, connection.blocked and unblocked), and dropping the
// connection. Runs on the owner's thread only (amqp_sink_class.hpp).
#include "sinks/amqp_sink_class.hpp"
#include "sinks/amqp_errors.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace outbox {

namespace {

// What we propose when tuning: RabbitMQ's own default frame size. The
// broker may lower it.
constexpr int kFrameMax = 131072;
// Channels are numbered anew after each channel the broker closed, so that
// a late frame of a closed channel is never taken for the new one's; the
// numbers wrap around below this.
constexpr int kMaxChannelNumber = 1024;
// The frame type librabbitmq gives the protocol header a server answers with
// when it does not speak our version ('A' of "AMQP"; its header keeps the
// name AMQP_PSEUDOFRAME_PROTOCOL_HEADER private).
constexpr uint8_t kProtocolHeaderFrame = 'A';

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the message, which need not be in buf.
  const char *text = strerror_r(err, buf, sizeof buf);
  return text != nullptr ? std::string(text) : std::to_string(err);
}

amqp_table_entry_t TextEntry(const char *key, const std::string &value) {
  amqp_table_entry_t e{};
  e.key = amqp_cstring_bytes(key);
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes = amqp_bytes_t{value.size(), const_cast<char *>(value.data())};
  return e;
}

amqp_table_entry_t BoolEntry(const char *key, bool value) {
  amqp_table_entry_t e{};
  e.key = amqp_cstring_bytes(key);
  e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
  e.value.value.boolean = value ? 1 : 0;
  return e;
}

std::string BytesText(amqp_bytes_t bytes) {
  return bytes.bytes == nullptr ? std::string()
                                : std::string(static_cast<const char *>(bytes.bytes), bytes.len);
}

// Whether a SASL mechanism list ("AMQPLAIN PLAIN") names PLAIN.
bool OffersPlain(amqp_bytes_t mechanisms) {
  const std::string list = " " + BytesText(mechanisms) + " ";
  return list.find(" PLAIN ") != std::string::npos;
}

#if !OUTBOX_AMQP_DEFAULT_VERIFY_PATHS
// The system's trust store, for librabbitmq before 0.14 (which cannot ask
// OpenSSL for its default paths): the bundle each distribution family
// keeps. Our choice of path, never a sink owner's.
const char *const kSystemBundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",  // Debian, Ubuntu, Alpine
    "/etc/pki/tls/certs/ca-bundle.crt",    // Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",              // SUSE
    "/etc/ssl/cert.pem",                   // Arch, BSDs
};
#endif

}  // namespace

std::string AmqpSink::LibraryError(int status) const {
  const char *text = amqp_error_string2(status);
  return text != nullptr ? std::string(text) : "librabbitmq status " + std::to_string(status);
}

int AmqpSink::ReadFrame(int timeout_ms, amqp_frame_t *frame) {
  // The previous frame's decoded content lives in librabbitmq's pools until
  // now: callers copy what they keep before reading the next one.
  amqp_maybe_release_buffers(conn_);
  timeval tv{timeout_ms / 1000, static_cast<suseconds_t>(timeout_ms % 1000) * 1000};
  return amqp_simple_wait_frame_noblock(conn_, frame, &tv);
}

AmqpSink::Stop AmqpSink::Connect(InterruptCheck interrupted, std::string *error) {
  const Clock::time_point deadline = Clock::now() + Millis(options_.connect_timeout_ms);
  conn_ = amqp_new_connection();
  if (conn_ == nullptr) throw std::bad_alloc();
  channel_ = 0;
  last_channel_ = 0;
  blocked_ = false;
  blocked_reason_.clear();
  max_body_.reset();
  Stop stop = OpenSocket(deadline, interrupted, error);
  if (stop == Stop::kNone) stop = Handshake(deadline, interrupted, error);
  if (stop == Stop::kNone) stop = OpenChannel(deadline, interrupted, error);
  if (stop == Stop::kFailed) *error = "cannot connect to " + endpoint_ + ": " + *error;
  return stop;
}

AmqpSink::Stop AmqpSink::OpenSocket(Clock::time_point deadline, InterruptCheck interrupted,
                                    std::string *error) {
  if (!options_.tls) {
    amqp_socket_t *socket = amqp_tcp_socket_new(conn_);  // owned by conn_
    if (socket == nullptr) throw std::bad_alloc();
    int fd = -1;
    const Stop stop = ConnectTcp(&fd, deadline, interrupted, error);
    if (stop == Stop::kNone) amqp_tcp_socket_set_sockfd(socket, fd);
    return stop;
  }
  amqp_socket_t *socket = amqp_ssl_socket_new(conn_);  // owned by conn_
  if (socket == nullptr) {
    *error = "cannot set up TLS (librabbitmq could not create its OpenSSL context)";
    return Stop::kFailed;
  }
  if (!SetUpTls(socket, error)) return Stop::kFailed;
  // librabbitmq resolves, connects and runs the TLS handshake itself: bounded
  // by the deadline, but `interrupted` is not checked meanwhile.
  const auto left =
      std::max<long long>(1, std::chrono::duration_cast<Millis>(deadline - Clock::now()).count());
  timeval tv{static_cast<time_t>(left / 1000), static_cast<suseconds_t>(left % 1000) * 1000};
  const int status =
      amqp_socket_open_noblock(socket, options_.host.c_str(), options_.EffectivePort(), &tv);
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return Stop::kFailed;
  }
  BoundWrites(amqp_get_sockfd(conn_));
  if (interrupted != nullptr && interrupted()) return Stop::kInterrupted;
  return Stop::kNone;
}

// librabbitmq writes a message whole, waiting for the socket as long as it
// takes (amqp_basic_publish has no deadline, and goes on after EINTR): a
// message larger than what the socket takes at once, sent to a broker that
// stopped reading (a stopped process whose kernel still acknowledges, its
// window shut), would hold the publisher until the broker read again.
// TCP_USER_TIMEOUT makes the kernel give the connection up when data waits
// unacknowledged, or unsent behind a shut window, for delivery_timeout_ms:
// the write then fails and the batch's rest is retried.
void AmqpSink::BoundWrites(int fd) const {
  if (fd < 0) return;
  const auto ms = static_cast<unsigned int>(options_.delivery_timeout_ms);
  static_cast<void>(setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms));
}

bool AmqpSink::SetUpTls(amqp_socket_t *socket, std::string *error) {
  const amqp_boolean_t verify = options_.tls_verify ? 1 : 0;
  amqp_ssl_socket_set_verify_peer(socket, verify);
  amqp_ssl_socket_set_verify_hostname(socket, verify);
  if (amqp_ssl_socket_set_ssl_versions(socket, AMQP_TLSv1_2, AMQP_TLSvLATEST) != AMQP_STATUS_OK) {
    *error = "cannot require TLS 1.2 or later";
    return false;
  }
  if (!options_.tls_verify) return true;
  if (!options_.tls_ca.empty()) {
    // librabbitmq loads trusted certificates only from a file: the option's
    // text goes through a private file of ours, gone once it is read.
    const char *dir = std::getenv("TMPDIR");
    std::string path =
        std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/outbox-amqp-ca-XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) {
      *error = "cannot write tls_ca for OpenSSL: " + ErrnoText(errno);
      return false;
    }
    const std::string &pem = options_.tls_ca;
    size_t written = 0;
    while (written < pem.size()) {
      const ssize_t w = write(fd, pem.data() + written, pem.size() - written);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      written += static_cast<size_t>(w);
    }
    close(fd);
    const int status = written == pem.size() ? amqp_ssl_socket_set_cacert(socket, path.c_str())
                                             : AMQP_STATUS_SSL_ERROR;
    unlink(path.c_str());
    if (status != AMQP_STATUS_OK) {
      *error = "option \"tls_ca\" holds no certificate OpenSSL can read";
      return false;
    }
    return true;
  }
#if OUTBOX_AMQP_DEFAULT_VERIFY_PATHS
  if (amqp_ssl_socket_enable_default_verify_paths(socket) != AMQP_STATUS_OK) {
    *error = "cannot load the system's trusted certificates (set option \"tls_ca\")";
    return false;
  }
  return true;
#else
  for (const char *bundle : kSystemBundles) {
    if (access(bundle, R_OK) == 0 && amqp_ssl_socket_set_cacert(socket, bundle) == AMQP_STATUS_OK) {
      return true;
    }
  }
  *error = "no system store of trusted certificates found (set option \"tls_ca\")";
  return false;
#endif
}

AmqpSink::Stop AmqpSink::ConnectTcp(int *out_fd, Clock::time_point deadline,
                                    InterruptCheck interrupted, std::string *error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  addrinfo *found = nullptr;
  // Name resolution comes first and is not bounded (the resolver's own
  // timeouts apply), as with the other sinks.
  const std::string port = std::to_string(options_.EffectivePort());
  const int gai = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found);
  if (gai != 0) {
    *error = std::string("cannot resolve host: ") + gai_strerror(gai);
    return Stop::kFailed;
  }
  Stop stop = Stop::kFailed;
  *error = "no address";
  for (const addrinfo *a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      *error = ErrnoText(errno);
      continue;
    }
    // As librabbitmq's own sockets: no Nagle delay for small publishes, and
    // keepalives so that a vanished peer shows on an idle connection.
    const int yes = 1;
    static_cast<void>(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes));
    static_cast<void>(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &yes, sizeof yes));
    BoundWrites(fd);
    int so_error = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      so_error = errno;
      while (so_error == EINPROGRESS || so_error == EINTR) {
        const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
        if (left <= 0) {
          so_error = ETIMEDOUT;
          break;
        }
        pollfd p{fd, POLLOUT, 0};
        const int ready = poll(&p, 1, static_cast<int>(std::min<long long>(kWaitSliceMs, left)));
        if (ready > 0) {
          socklen_t size = sizeof so_error;
          if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &size) != 0) so_error = errno;
        } else if (ready < 0 && errno != EINTR) {
          so_error = errno;
        } else if (interrupted != nullptr && interrupted()) {
          stop = Stop::kInterrupted;
          break;
        }
      }
    }
    if (stop == Stop::kInterrupted) {
      close(fd);
      break;
    }
    if (so_error == 0) {
      *out_fd = fd;
      stop = Stop::kNone;
      break;
    }
    close(fd);
    *error = so_error == ETIMEDOUT && Clock::now() >= deadline
                 ? "timed out after " + std::to_string(options_.connect_timeout_ms) + " ms"
                 : ErrnoText(so_error);
  }
  freeaddrinfo(found);
  return stop;
}

AmqpSink::Stop AmqpSink::Handshake(Clock::time_point deadline, InterruptCheck interrupted,
                                   std::string *error) {
  int status = amqp_send_header(conn_);
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return Stop::kFailed;
  }
  amqp_method_t method{};
  Stop stop = WaitMethod(0, AMQP_CONNECTION_START_METHOD, deadline, interrupted, &method, error);
  if (stop != Stop::kNone) return stop;
  {
    const auto *start = static_cast<const amqp_connection_start_t *>(method.decoded);
    if (start->version_major != 0 || start->version_minor != 9) {
      *error = "the server does not speak AMQP 0-9-1";
      return Stop::kFailed;
    }
    if (!OffersPlain(start->mechanisms)) {
      *error = "the server does not offer PLAIN authentication (it offers " +
               BytesText(start->mechanisms) + ")";
      return Stop::kFailed;
    }
  }
  {
    // What RabbitMQ's management UI shows, and what we understand:
    // authentication_failure_close turns a refused login into a
    // connection.close that says so (rather than a bare disconnect), and
    // connection.blocked tells us when a resource alarm stops publishes.
    amqp_table_entry_t capabilities[] = {BoolEntry("authentication_failure_close", true),
                                         BoolEntry("connection.blocked", true)};
    const std::string product = "outbox";
    const std::string connection_name = "outbox-" + name_;
    amqp_table_entry_t properties[3] = {
        TextEntry("product", product), TextEntry("connection_name", connection_name), {}};
    properties[2].key = amqp_cstring_bytes("capabilities");
    properties[2].value.kind = AMQP_FIELD_KIND_TABLE;
    properties[2].value.value.table = amqp_table_t{2, capabilities};
    // PLAIN: NUL, user, NUL, password (the options hold no NUL).
    std::string response;
    response.reserve(2 + options_.user.size() + options_.password.size());
    response.push_back('\0');
    response += options_.user;
    response.push_back('\0');
    response += options_.password;
    amqp_connection_start_ok_t start_ok{};
    start_ok.client_properties = amqp_table_t{3, properties};
    start_ok.mechanism = amqp_cstring_bytes("PLAIN");
    start_ok.response = amqp_bytes_t{response.size(), response.data()};
    start_ok.locale = amqp_cstring_bytes("en_US");
    status = amqp_send_method(conn_, 0, AMQP_CONNECTION_START_OK_METHOD, &start_ok);
    std::fill(response.begin(), response.end(), '\0');
    if (status != AMQP_STATUS_OK) {
      *error = LibraryError(status);
      return Stop::kFailed;
    }
  }
  // A refused login is a connection.close (ACCESS_REFUSED) instead.
  stop = WaitMethod(0, AMQP_CONNECTION_TUNE_METHOD, deadline, interrupted, &method, error);
  if (stop != Stop::kNone) return stop;
  amqp_connection_tune_ok_t tune_ok{};
  {
    const auto *tune = static_cast<const amqp_connection_tune_t *>(method.decoded);
    // As librabbitmq's amqp_login negotiates: the server's limits win where
    // it has any; a heartbeat of 0 on our side turns heartbeats off.
    tune_ok.channel_max = tune->channel_max != 0 ? tune->channel_max : UINT16_MAX;
    tune_ok.frame_max = tune->frame_max != 0 && tune->frame_max < static_cast<uint32_t>(kFrameMax)
                            ? tune->frame_max
                            : kFrameMax;
    int heartbeat = options_.heartbeat_s;
    if (tune->heartbeat != 0 && tune->heartbeat < heartbeat) heartbeat = tune->heartbeat;
    tune_ok.heartbeat = static_cast<uint16_t>(heartbeat);
  }
  channel_max_ = tune_ok.channel_max;
  frame_max_ = static_cast<int>(tune_ok.frame_max);
  status = amqp_tune_connection(conn_, tune_ok.channel_max, frame_max_, tune_ok.heartbeat);
  if (status == AMQP_STATUS_OK) {
    status = amqp_send_method(conn_, 0, AMQP_CONNECTION_TUNE_OK_METHOD, &tune_ok);
  }
  if (status == AMQP_STATUS_OK) {
    amqp_connection_open_t open{};
    open.virtual_host = amqp_cstring_bytes(options_.vhost.c_str());
    open.capabilities = amqp_empty_bytes;
    open.insist = 1;
    status = amqp_send_method(conn_, 0, AMQP_CONNECTION_OPEN_METHOD, &open);
  }
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return Stop::kFailed;
  }
  // A virtual host the user may not use is a connection.close (NOT_ALLOWED).
  return WaitMethod(0, AMQP_CONNECTION_OPEN_OK_METHOD, deadline, interrupted, &method, error);
}

AmqpSink::Stop AmqpSink::OpenChannel(Clock::time_point deadline, InterruptCheck interrupted,
                                     std::string *error) {
  const int limit = std::min(channel_max_ > 0 ? channel_max_ : 1, kMaxChannelNumber);
  const auto channel = static_cast<amqp_channel_t>(last_channel_ % limit + 1);
  last_channel_ = channel;
  amqp_channel_open_t open{};
  open.out_of_band = amqp_empty_bytes;
  int status = amqp_send_method(conn_, channel, AMQP_CHANNEL_OPEN_METHOD, &open);
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return Stop::kFailed;
  }
  amqp_method_t method{};
  Stop stop =
      WaitMethod(channel, AMQP_CHANNEL_OPEN_OK_METHOD, deadline, interrupted, &method, error);
  if (stop != Stop::kNone) return stop;
  // Publisher confirms: every publish from now on is answered by basic.ack
  // or basic.nack, numbered from 1 on this channel.
  amqp_confirm_select_t select{};
  select.nowait = 0;
  status = amqp_send_method(conn_, channel, AMQP_CONFIRM_SELECT_METHOD, &select);
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return Stop::kFailed;
  }
  stop = WaitMethod(channel, AMQP_CONFIRM_SELECT_OK_METHOD, deadline, interrupted, &method, error);
  if (stop != Stop::kNone) return stop;
  channel_ = channel;
  next_tag_ = 1;
  return Stop::kNone;
}

AmqpSink::Stop AmqpSink::WaitMethod(amqp_channel_t channel, amqp_method_number_t expected,
                                    Clock::time_point deadline, InterruptCheck interrupted,
                                    amqp_method_t *method, std::string *error) {
  Clock::time_point checked = Clock::now();
  for (;;) {
    const Clock::time_point now = Clock::now();
    const auto left = std::chrono::duration_cast<Millis>(deadline - now).count();
    if (left <= 0) {
      *error = "no answer within " + std::to_string(options_.connect_timeout_ms) + " ms";
      return Stop::kFailed;
    }
    if (interrupted != nullptr && now - checked >= Millis(kWaitSliceMs)) {
      checked = now;
      if (interrupted()) return Stop::kInterrupted;
    }
    amqp_frame_t frame{};
    const int status = ReadFrame(static_cast<int>(std::min<long long>(kWaitSliceMs, left)), &frame);
    if (status == AMQP_STATUS_TIMEOUT) {
      checked = Clock::now();
      if (interrupted != nullptr && interrupted()) return Stop::kInterrupted;
      continue;
    }
    if (status != AMQP_STATUS_OK) {
      *error = LibraryError(status);
      return Stop::kFailed;
    }
    if (frame.frame_type == kProtocolHeaderFrame) {
      *error = "the server does not speak AMQP 0-9-1 (it answered with its protocol header)";
      return Stop::kFailed;
    }
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;
    const amqp_method_t &m = frame.payload.method;
    if (frame.channel == channel && m.id == expected) {
      *method = m;
      return Stop::kNone;
    }
    if (frame.channel == 0) {
      if (!OnConnectionMethod(m, error)) return Stop::kFailed;
      continue;
    }
    if (frame.channel == channel && m.id == AMQP_CHANNEL_CLOSE_METHOD) {
      const auto *close = static_cast<const amqp_channel_close_t *>(m.decoded);
      *error = "the broker closed the channel: " + AmqpReplyCodeName(close->reply_code) + ": " +
               BytesText(close->reply_text);
      CloseChannelOk(channel);
      return Stop::kFailed;
    }
    // Anything else (a frame of a channel closed earlier) is not ours.
  }
}

bool AmqpSink::OnConnectionMethod(const amqp_method_t &method, std::string *error) {
  switch (method.id) {
    case AMQP_CONNECTION_CLOSE_METHOD: {
      const auto *close = static_cast<const amqp_connection_close_t *>(method.decoded);
      *error = "the broker closed the connection: " + AmqpReplyCodeName(close->reply_code) + ": " +
               BytesText(close->reply_text);
      amqp_connection_close_ok_t ok{};
      static_cast<void>(amqp_send_method(conn_, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok));
      return false;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD: {
      const auto *blocked = static_cast<const amqp_connection_blocked_t *>(method.decoded);
      blocked_ = true;
      blocked_reason_ = BytesText(blocked->reason);
      AddLog(LogLevel::kWarning,
             "the broker at " + endpoint_ + " blocks publishing (" + blocked_reason_ + ")");
      return true;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
      if (blocked_)
        AddLog(LogLevel::kInfo, "the broker at " + endpoint_ + " takes publishes again");
      blocked_ = false;
      blocked_reason_.clear();
      return true;
    default:
      return true;  // nothing else on channel 0 concerns a publisher
  }
}

// Reads, without waiting, what arrived while the connection sat idle
// (heartbeats, connection.blocked, a connection.close), and lets
// librabbitmq send a heartbeat that is due. False when the connection is
// gone, with *error saying why.
bool AmqpSink::Drain(std::string *error) {
  for (;;) {
    amqp_frame_t frame{};
    const int status = ReadFrame(0, &frame);
    if (status == AMQP_STATUS_TIMEOUT) return true;
    if (status != AMQP_STATUS_OK) {
      *error = LibraryError(status);
      return false;
    }
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;
    if (frame.channel == 0) {
      if (!OnConnectionMethod(frame.payload.method, error)) return false;
    } else if (frame.channel == channel_ && frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
      CloseChannelOk(channel_);
      channel_ = 0;  // reopened before the next publish
    }
  }
}

void AmqpSink::CloseChannelOk(amqp_channel_t channel) {
  amqp_channel_close_ok_t ok{};
  static_cast<void>(amqp_send_method(conn_, channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok));
  if (channel == channel_) channel_ = 0;
}

void AmqpSink::Disconnect() noexcept {
  if (conn_ == nullptr) return;
  // No connection.close: waiting for its answer could take long, and what
  // we leave unconfirmed is retried anyway. The broker notes an unexpected
  // close in its log.
  amqp_destroy_connection(conn_);
  conn_ = nullptr;
  channel_ = 0;
  blocked_ = false;
  blocked_reason_.clear();
}

}  // namespace outbox
