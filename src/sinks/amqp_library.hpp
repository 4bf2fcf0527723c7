// librabbitmq's headers, wherever this version keeps them: 0.11 (Debian 12)
// installs <amqp.h> and friends; 0.12 and later install <rabbitmq-c/...>
// (and a deprecated <amqp.h> that warns). Only the amqp_* files of the
// AMQP sink include this.
#pragma once

#if __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/framing.h>
#include <rabbitmq-c/ssl_socket.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#endif

// amqp_ssl_socket_enable_default_verify_paths (the system's trust store)
// came in 0.14; before it the sink names the distribution's bundle itself.
#if AMQP_VERSION_MAJOR > 0 || AMQP_VERSION_MINOR >= 14
#define OUTBOX_AMQP_DEFAULT_VERIFY_PATHS 1
#else
#define OUTBOX_AMQP_DEFAULT_VERIFY_PATHS 0
#endif
