// The AMQP sink's connection, made without waiting: a TCP connect of our
// own (non-blocking) or librabbitmq's TLS socket, then the AMQP handshake
// frame by frame (PLAIN authentication, tuning, the virtual host) and a
// channel in confirm mode, each step taken by Step as the broker's answers
// come (StepConnecting), within connect_timeout_ms; what the broker says on
// channel 0 (connection.close, connection.blocked and unblocked); and
// dropping the connection. Runs on the owner's thread only
// (amqp_sink_class.hpp).
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

// Starts a connection: conn_ made and its socket connecting (or, with TLS,
// connected and the protocol header sent). Step drives the rest
// (StepConnecting) within connect_timeout_ms. False with *error when it
// cannot even start. Name resolution comes first and is not bounded (the
// resolver's own timeouts apply), as with the other sinks; a TLS connection
// is opened by librabbitmq, which waits for it (bounded by the deadline).
bool AmqpSink::StartConnecting(InterruptCheck interrupted, std::string *error) {
  connect_deadline_ = Clock::now() + Millis(options_.connect_timeout_ms);
  conn_ = amqp_new_connection();
  if (conn_ == nullptr) throw std::bad_alloc();
  channel_ = 0;
  last_channel_ = 0;
  blocked_ = false;
  blocked_reason_.clear();
  max_body_.reset();
  connection_open_ = false;
  if (options_.tls) {
    if (!OpenTlsSocket(error)) return false;
    if (interrupted != nullptr && interrupted()) {
      *error = "interrupted";
      return false;
    }
    return SendProtocolHeader(error);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  addrinfo *found = nullptr;
  const std::string port = std::to_string(options_.EffectivePort());
  const int gai = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found);
  if (gai != 0) {
    *error = std::string("cannot resolve host: ") + gai_strerror(gai);
    return false;
  }
  addresses_.clear();
  next_address_ = 0;
  try {
    for (const addrinfo *a = found; a != nullptr; a = a->ai_next) {
      if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
      Address address;
      address.family = a->ai_family;
      address.socktype = a->ai_socktype;
      address.protocol = a->ai_protocol;
      std::memcpy(&address.addr, a->ai_addr, a->ai_addrlen);
      address.len = a->ai_addrlen;
      addresses_.push_back(address);
    }
  } catch (...) {
    freeaddrinfo(found);
    throw;
  }
  freeaddrinfo(found);
  *error = "no address";
  return ConnectNextAddress(error);
}

bool AmqpSink::OpenTlsSocket(std::string *error) {
  amqp_socket_t *socket = amqp_ssl_socket_new(conn_);  // owned by conn_
  if (socket == nullptr) {
    *error = "cannot set up TLS (librabbitmq could not create its OpenSSL context)";
    return false;
  }
  if (!SetUpTls(socket, error)) return false;
  // librabbitmq resolves, connects and runs the TLS handshake itself, and
  // waits for them: bounded by the deadline, not sliced.
  const auto left = std::max<long long>(
      1, std::chrono::duration_cast<Millis>(connect_deadline_ - Clock::now()).count());
  timeval tv{static_cast<time_t>(left / 1000), static_cast<suseconds_t>(left % 1000) * 1000};
  const int status =
      amqp_socket_open_noblock(socket, options_.host.c_str(), options_.EffectivePort(), &tv);
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return false;
  }
  BoundWrites(amqp_get_sockfd(conn_));
  return true;
}

// librabbitmq writes a message whole, waiting for the socket as long as it
// takes (amqp_basic_publish has no deadline, and goes on after EINTR): a
// message larger than what the socket takes at once, sent to a broker that
// stopped reading (a stopped process whose kernel still acknowledges, its
// window shut), would hold the publisher until the broker read again.
// TCP_USER_TIMEOUT makes the kernel give the connection up when data waits
// unacknowledged, or unsent behind a shut window, for delivery_timeout_ms:
// the write then fails and the sink treats the connection as lost.
void AmqpSink::BoundWrites(int fd) const {
  if (fd < 0) return;
  const unsigned int ms = static_cast<unsigned int>(options_.delivery_timeout_ms);
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

// Starts a non-blocking TCP connect to the next address that takes one
// (phase kTcp), or hands a socket connected at once to librabbitmq. False
// with *error when no address is left.
bool AmqpSink::ConnectNextAddress(std::string *error) {
  while (next_address_ < addresses_.size()) {
    const Address &a = addresses_[next_address_++];
    const int fd = socket(a.family, a.socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.protocol);
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
    if (connect(fd, reinterpret_cast<const sockaddr *>(&a.addr), a.len) == 0) {
      return TcpConnected(fd, error);
    }
    if (errno == EINPROGRESS || errno == EINTR) {
      tcp_fd_ = fd;
      phase_ = Phase::kTcp;
      return true;
    }
    *error = ErrnoText(errno);
    close(fd);
  }
  return false;
}

// The TCP connection is up: librabbitmq takes the socket, and the AMQP
// handshake starts.
bool AmqpSink::TcpConnected(int fd, std::string *error) {
  amqp_socket_t *socket = amqp_tcp_socket_new(conn_);  // owned by conn_
  if (socket == nullptr) {
    close(fd);
    throw std::bad_alloc();
  }
  amqp_tcp_socket_set_sockfd(socket, fd);
  return SendProtocolHeader(error);
}

bool AmqpSink::SendProtocolHeader(std::string *error) {
  const int status = amqp_send_header(conn_);
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return false;
  }
  phase_ = Phase::kStart;
  return true;
}

// Drives a connection (or a channel) being made for up to wait_ms; when it
// fails or its deadline passes, every open Send's messages (none of them was
// sent) are retriable and the sink is down.
void AmqpSink::StepConnecting(int64_t wait_ms) {
  std::string error;
  if (AdvanceConnecting(wait_ms, &error)) return;
  error = Masked((connection_open_ ? "cannot reopen a channel on " : "cannot connect to ") +
                 endpoint_ + ": " + error);
  sends_.FailAllRest(error.c_str());
  NoteDown(error);
  Disconnect();
}

// False with *error when the connection cannot be made.
bool AmqpSink::AdvanceConnecting(int64_t wait_ms, std::string *error) {
  const auto left = std::chrono::duration_cast<Millis>(connect_deadline_ - Clock::now()).count();
  int64_t wait = std::clamp<int64_t>(left, 0, wait_ms);
  if (phase_ == Phase::kTcp) {
    pollfd p{tcp_fd_, POLLOUT, 0};
    const int ready = poll(&p, 1, static_cast<int>(wait));
    if (ready > 0) {
      int so_error = 0;
      socklen_t size = sizeof so_error;
      if (getsockopt(tcp_fd_, SOL_SOCKET, SO_ERROR, &so_error, &size) != 0) so_error = errno;
      const int fd = tcp_fd_;
      tcp_fd_ = -1;
      if (so_error == 0) {
        if (!TcpConnected(fd, error)) return false;
      } else {
        close(fd);
        phase_ = Phase::kNone;
        *error = ErrnoText(so_error);
        if (!ConnectNextAddress(error)) return false;
      }
    } else if (ready < 0 && errno != EINTR) {
      *error = ErrnoText(errno);
      return false;
    }
    if (phase_ == Phase::kTcp) {
      if (Clock::now() < connect_deadline_) return true;
      *error = "timed out after " + std::to_string(options_.connect_timeout_ms) + " ms";
      return false;
    }
    wait = 0;
  }
  for (int frames = 0; phase_ != Phase::kNone && frames < kMaxFramesPerStep; ++frames) {
    amqp_frame_t frame{};
    const int status = ReadFrame(frames == 0 ? static_cast<int>(wait) : 0, &frame);
    if (status == AMQP_STATUS_TIMEOUT) break;
    if (status != AMQP_STATUS_OK) {
      *error = LibraryError(status);
      return false;
    }
    if (!OnHandshakeFrame(frame, error)) return false;
  }
  if (phase_ != Phase::kNone && Clock::now() >= connect_deadline_) {
    *error = "no answer within " + std::to_string(options_.connect_timeout_ms) + " ms";
    return false;
  }
  return true;
}

// One frame while connecting: the method the phase waits for moves it on;
// what the broker says on channel 0 meanwhile is heard (a refused login or
// virtual host is a connection.close); anything else is a late frame of a
// channel closed earlier.
bool AmqpSink::OnHandshakeFrame(const amqp_frame_t &frame, std::string *error) {
  if (frame.frame_type == kProtocolHeaderFrame) {
    *error = "the server does not speak AMQP 0-9-1 (it answered with its protocol header)";
    return false;
  }
  if (frame.frame_type != AMQP_FRAME_METHOD) return true;
  const amqp_method_t &m = frame.payload.method;
  const bool on_channel = phase_ == Phase::kChannel || phase_ == Phase::kSelect;
  const amqp_channel_t expected_channel = on_channel ? opening_channel_ : 0;
  amqp_method_number_t expected = 0;
  switch (phase_) {
    case Phase::kStart:
      expected = AMQP_CONNECTION_START_METHOD;
      break;
    case Phase::kTune:
      expected = AMQP_CONNECTION_TUNE_METHOD;
      break;
    case Phase::kOpen:
      expected = AMQP_CONNECTION_OPEN_OK_METHOD;
      break;
    case Phase::kChannel:
      expected = AMQP_CHANNEL_OPEN_OK_METHOD;
      break;
    case Phase::kSelect:
      expected = AMQP_CONFIRM_SELECT_OK_METHOD;
      break;
    case Phase::kNone:
    case Phase::kTcp:
      return true;
  }
  if (frame.channel == expected_channel && m.id == expected) return Advance(m, error);
  if (frame.channel == 0) return OnConnectionMethod(m, error);
  if (on_channel && frame.channel == opening_channel_ && m.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const auto *close = static_cast<const amqp_channel_close_t *>(m.decoded);
    *error = "the broker closed the channel: " + AmqpReplyCodeName(close->reply_code) + ": " +
             BytesText(close->reply_text);
    CloseChannelOk(opening_channel_);
    return false;
  }
  return true;
}

// The awaited method of the phase came: answer it and go to the next.
bool AmqpSink::Advance(const amqp_method_t &m, std::string *error) {
  switch (phase_) {
    case Phase::kStart:
      if (!SendStartOk(m, error)) return false;
      phase_ = Phase::kTune;
      return true;
    case Phase::kTune:
      if (!SendTuneOkAndOpen(m, error)) return false;
      phase_ = Phase::kOpen;
      return true;
    case Phase::kOpen:
      connection_open_ = true;
      AddLog(LogLevel::kInfo, "connected to " + endpoint_ + " vhost \"" + options_.vhost + "\"");
      return StartChannel(error);
    case Phase::kChannel: {
      // Publisher confirms: every publish from now on is answered by
      // basic.ack or basic.nack, numbered from 1 on this channel.
      amqp_confirm_select_t select{};
      select.nowait = 0;
      const int status =
          amqp_send_method(conn_, opening_channel_, AMQP_CONFIRM_SELECT_METHOD, &select);
      if (status != AMQP_STATUS_OK) {
        *error = LibraryError(status);
        return false;
      }
      phase_ = Phase::kSelect;
      return true;
    }
    case Phase::kSelect:
      // Nothing is unconfirmed: the last channel's messages were settled
      // when it closed.
      tag_of_id_.clear();
      unconfirmed_.clear();
      pending_return_.reset();
      channel_ = opening_channel_;
      ++channel_epoch_;
      next_tag_ = 1;
      phase_ = Phase::kNone;
      progress_ = Clock::now();
      return true;
    case Phase::kNone:
    case Phase::kTcp:
      break;
  }
  return true;
}

bool AmqpSink::SendStartOk(const amqp_method_t &m, std::string *error) {
  const auto *start = static_cast<const amqp_connection_start_t *>(m.decoded);
  if (start->version_major != 0 || start->version_minor != 9) {
    *error = "the server does not speak AMQP 0-9-1";
    return false;
  }
  if (!OffersPlain(start->mechanisms)) {
    *error = "the server does not offer PLAIN authentication (it offers " +
             BytesText(start->mechanisms) + ")";
    return false;
  }
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
  const int status = amqp_send_method(conn_, 0, AMQP_CONNECTION_START_OK_METHOD, &start_ok);
  std::fill(response.begin(), response.end(), '\0');
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return false;
  }
  return true;
}

bool AmqpSink::SendTuneOkAndOpen(const amqp_method_t &m, std::string *error) {
  amqp_connection_tune_ok_t tune_ok{};
  {
    const auto *tune = static_cast<const amqp_connection_tune_t *>(m.decoded);
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
  int status = amqp_tune_connection(conn_, tune_ok.channel_max, frame_max_, tune_ok.heartbeat);
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
    return false;
  }
  // A virtual host the user may not use is a connection.close (NOT_ALLOWED).
  return true;
}

// Opens a channel in confirm mode (phases kChannel, kSelect): after the
// connection opens, and after the broker closed the last channel. Channels
// are numbered anew each time, so that a late frame of a closed channel is
// never taken for the new one's.
bool AmqpSink::StartChannel(std::string *error) {
  const int limit = std::min(channel_max_ > 0 ? channel_max_ : 1, kMaxChannelNumber);
  const auto channel = static_cast<amqp_channel_t>(last_channel_ % limit + 1);
  last_channel_ = channel;
  amqp_channel_open_t open{};
  open.out_of_band = amqp_empty_bytes;
  const int status = amqp_send_method(conn_, channel, AMQP_CHANNEL_OPEN_METHOD, &open);
  if (status != AMQP_STATUS_OK) {
    *error = LibraryError(status);
    return false;
  }
  opening_channel_ = channel;
  phase_ = Phase::kChannel;
  return true;
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

void AmqpSink::CloseChannelOk(amqp_channel_t channel) {
  amqp_channel_close_ok_t ok{};
  static_cast<void>(amqp_send_method(conn_, channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok));
  if (channel == channel_) channel_ = 0;
}

void AmqpSink::Disconnect() noexcept {
  if (tcp_fd_ >= 0) {
    close(tcp_fd_);  // still connecting: not librabbitmq's yet
    tcp_fd_ = -1;
  }
  phase_ = Phase::kNone;
  connection_open_ = false;
  if (conn_ == nullptr) return;
  // No connection.close: waiting for its answer could take long, and what
  // we leave unconfirmed is retried anyway. The broker notes an unexpected
  // close in its log.
  amqp_destroy_connection(conn_);
  conn_ = nullptr;
  channel_ = 0;
  blocked_ = false;
  blocked_reason_.clear();
  tag_of_id_.clear();
  unconfirmed_.clear();
  pending_return_.reset();
  stuck_ = false;
}

}  // namespace outbox