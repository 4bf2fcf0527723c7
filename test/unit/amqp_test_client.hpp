// A blocking librabbitmq client for the AMQP sink's unit tests: declares
// what a test needs (queues with arguments, exchanges, bindings) and reads
// back what arrived (basic.get), properties and headers included. Every call
// is bounded by an RPC timeout, so a test never hangs on a broken node.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sinks/amqp_library.hpp"

namespace outbox {
namespace amqp_test {

// One message as a consumer sees it.
struct Received {
  std::string body;
  uint32_t flags = 0;  // which properties were set (AMQP_BASIC_*_FLAG)
  std::string message_id, type, content_type, app_id;
  uint8_t delivery_mode = 0;
  uint64_t timestamp = 0;
  bool has_headers = false;
  std::vector<std::pair<std::string, std::string>> headers;  // string values, in order

  // The value of the header `name`, or "<absent>".
  std::string Header(const std::string &name) const {
    for (const auto &[key, value] : headers) {
      if (key == name) return value;
    }
    return "<absent>";
  }
};

inline std::string Text(amqp_bytes_t bytes) {
  return bytes.bytes == nullptr ? std::string()
                                : std::string(static_cast<const char *>(bytes.bytes), bytes.len);
}

class Client {
 public:
  explicit Client(int port, const std::string &user = "guest",
                  const std::string &password = "guest") {
    conn_ = amqp_new_connection();
    amqp_socket_t *socket = amqp_tcp_socket_new(conn_);
    timeval tv{10, 0};
    if (socket == nullptr || amqp_socket_open_noblock(socket, "127.0.0.1", port, &tv) != 0) return;
    amqp_set_handshake_timeout(conn_, &tv);
    amqp_set_rpc_timeout(conn_, &tv);
    if (amqp_login(conn_, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, user.c_str(), password.c_str())
            .reply_type != AMQP_RESPONSE_NORMAL) {
      return;
    }
    ok_ = OpenChannel();
  }
  ~Client() {
    if (conn_ != nullptr) amqp_destroy_connection(conn_);
  }
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  bool ok() const { return ok_; }
  const std::string &error() const { return error_; }

  // A durable queue; `args` are x-arguments with integer or string values
  // (an integer when the text is all digits).
  bool DeclareQueue(const std::string &name,
                    const std::vector<std::pair<std::string, std::string>> &args = {}) {
    std::vector<amqp_table_entry_t> entries;
    for (const auto &[key, value] : args) {
      amqp_table_entry_t e{};
      e.key = amqp_cstring_bytes(key.c_str());
      if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
        e.value.kind = AMQP_FIELD_KIND_I64;
        e.value.value.i64 = std::stoll(value);
      } else {
        e.value.kind = AMQP_FIELD_KIND_UTF8;
        e.value.value.bytes = amqp_cstring_bytes(value.c_str());
      }
      entries.push_back(e);
    }
    const amqp_table_t table{static_cast<int>(entries.size()), entries.data()};
    amqp_queue_declare(conn_, channel_, amqp_cstring_bytes(name.c_str()), 0, 1, 0, 0, table);
    return Check("queue.declare " + name);
  }
  bool DeleteQueue(const std::string &name) {
    amqp_queue_delete(conn_, channel_, amqp_cstring_bytes(name.c_str()), 0, 0);
    return Check("queue.delete " + name);
  }
  bool Purge(const std::string &name) {
    amqp_queue_purge(conn_, channel_, amqp_cstring_bytes(name.c_str()));
    return Check("queue.purge " + name);
  }
  bool DeclareExchange(const std::string &name, const std::string &type) {
    amqp_exchange_declare(conn_, channel_, amqp_cstring_bytes(name.c_str()),
                          amqp_cstring_bytes(type.c_str()), 0, 1, 0, 0, amqp_empty_table);
    return Check("exchange.declare " + name);
  }
  bool DeleteExchange(const std::string &name) {
    amqp_exchange_delete(conn_, channel_, amqp_cstring_bytes(name.c_str()), 0);
    return Check("exchange.delete " + name);
  }
  bool Bind(const std::string &queue, const std::string &exchange, const std::string &key) {
    amqp_queue_bind(conn_, channel_, amqp_cstring_bytes(queue.c_str()),
                    amqp_cstring_bytes(exchange.c_str()), amqp_cstring_bytes(key.c_str()),
                    amqp_empty_table);
    return Check("queue.bind " + queue);
  }
  // How many messages the queue holds; -1 if it does not exist.
  long Count(const std::string &queue) {
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(
        conn_, channel_, amqp_cstring_bytes(queue.c_str()), 1, 0, 0, 0, amqp_empty_table);
    if (!Check("queue.declare passive " + queue) || ok == nullptr) return -1;
    return static_cast<long>(ok->message_count);
  }

  // The next message of the queue (taken off it), if any.
  std::optional<Received> Get(const std::string &queue) {
    const amqp_rpc_reply_t reply =
        amqp_basic_get(conn_, channel_, amqp_cstring_bytes(queue.c_str()), /*no_ack=*/1);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
      Check("basic.get " + queue, reply);
      return std::nullopt;
    }
    if (reply.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) return std::nullopt;
    amqp_message_t message{};
    if (amqp_read_message(conn_, channel_, &message, 0).reply_type != AMQP_RESPONSE_NORMAL) {
      error_ = "cannot read a message";
      ok_ = false;
      return std::nullopt;
    }
    Received r;
    r.body = Text(message.body);
    const amqp_basic_properties_t &p = message.properties;
    r.flags = p._flags;
    if (p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) r.message_id = Text(p.message_id);
    if (p._flags & AMQP_BASIC_TYPE_FLAG) r.type = Text(p.type);
    if (p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) r.content_type = Text(p.content_type);
    if (p._flags & AMQP_BASIC_APP_ID_FLAG) r.app_id = Text(p.app_id);
    if (p._flags & AMQP_BASIC_DELIVERY_MODE_FLAG) r.delivery_mode = p.delivery_mode;
    if (p._flags & AMQP_BASIC_TIMESTAMP_FLAG) r.timestamp = p.timestamp;
    if (p._flags & AMQP_BASIC_HEADERS_FLAG) {
      r.has_headers = true;
      for (int i = 0; i < p.headers.num_entries; ++i) {
        const amqp_table_entry_t &e = p.headers.entries[i];
        const bool text =
            e.value.kind == AMQP_FIELD_KIND_UTF8 || e.value.kind == AMQP_FIELD_KIND_BYTES;
        r.headers.emplace_back(Text(e.key), text ? Text(e.value.value.bytes) : "<not a string>");
      }
    }
    amqp_destroy_message(&message);
    amqp_maybe_release_buffers(conn_);
    return r;
  }
  std::vector<Received> GetAll(const std::string &queue) {
    std::vector<Received> all;
    while (std::optional<Received> r = Get(queue)) all.push_back(std::move(*r));
    return all;
  }

 private:
  bool OpenChannel() {
    ++channel_;
    amqp_channel_open(conn_, channel_);
    return Check("channel.open");
  }
  bool Check(const std::string &what) { return Check(what, amqp_get_rpc_reply(conn_)); }
  bool Check(const std::string &what, const amqp_rpc_reply_t &reply) {
    if (reply.reply_type == AMQP_RESPONSE_NORMAL) return true;
    error_ = what + " failed";
    if (reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
      const auto *close = static_cast<amqp_channel_close_t *>(reply.reply.decoded);
      error_ += ": " + std::to_string(close->reply_code) + " " + Text(close->reply_text);
      amqp_channel_close_ok_t ok{};
      amqp_send_method(conn_, channel_, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
      ok_ = OpenChannel();  // a failed passive declare closes the channel
    } else {
      ok_ = false;
    }
    return false;
  }

  amqp_connection_state_t conn_ = nullptr;
  amqp_channel_t channel_ = 0;
  bool ok_ = false;
  std::string error_;
};

}  // namespace amqp_test
}  // namespace outbox
