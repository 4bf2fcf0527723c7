#!/usr/bin/python3
"""A RabbitMQ client for outbox's TAP tests (test/lib/OutboxRabbit.pm).

Declares what a test needs and reads back what arrived, with pika (Debian's
python3-pika; run with /usr/bin/python3, which has it). One command a run:

  amqp_tool.py --port P [--user U --password-env VAR] COMMAND ARGS

  ping                           exit 0 once a login works
  declare-queue NAME [K=V ...]   a durable queue; x-arguments with integer
                                 values when all digits (x-max-length=2)
  declare-exchange NAME TYPE     a durable exchange
  bind QUEUE EXCHANGE KEY
  count QUEUE                    prints the number of messages
  dump QUEUE                     takes every message now on the queue off it, prints
                                 one JSON object a line: body (text),
                                 message_id, type, content_type, app_id,
                                 delivery_mode, timestamp, headers (an object
                                 of string values, or null), header_names (in
                                 order)
  purge QUEUE

The password comes from an environment variable, never the command line.
"""

import argparse
import json
import os
import sys

import pika


def connect(args):
    credentials = pika.PlainCredentials(args.user, os.environ.get(args.password_env, "guest"))
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=args.port,
        credentials=credentials,
        connection_attempts=1,
        socket_timeout=5,
        blocked_connection_timeout=10,
    )
    return pika.BlockingConnection(params)


def text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password-env", default="OUTBOX_TEST_AMQP_PASSWORD")
    parser.add_argument("command")
    parser.add_argument("args", nargs="*")
    args = parser.parse_args()

    try:
        conn = connect(args)
    except Exception as e:  # the node is not up (yet)
        print(f"cannot connect: {e!r}", file=sys.stderr)
        return 2
    ch = conn.channel()
    cmd, rest = args.command, args.args
    if cmd == "ping":
        pass
    elif cmd == "declare-queue":
        arguments = {}
        for kv in rest[1:]:
            k, v = kv.split("=", 1)
            arguments[k] = int(v) if v.isdigit() else v
        ch.queue_declare(rest[0], durable=True, arguments=arguments or None)
    elif cmd == "declare-exchange":
        ch.exchange_declare(rest[0], exchange_type=rest[1], durable=True)
    elif cmd == "bind":
        ch.queue_bind(rest[0], rest[1], routing_key=rest[2])
    elif cmd == "count":
        print(ch.queue_declare(rest[0], passive=True).method.message_count)
    elif cmd == "purge":
        ch.queue_purge(rest[0])
    elif cmd == "dump":
        # What the queue holds now, pushed by the broker (basic.consume,
        # 1,000 unacknowledged at a time) rather than fetched one round trip
        # each (basic.get): a fault scenario on a loaded machine leaves
        # 100,000 messages, which took minutes that way. Acknowledged only
        # once printed; what the broker pushed beyond them goes back to the
        # queue with the cancel, in its place, for the next dump.
        remaining = ch.queue_declare(rest[0], passive=True).method.message_count
        lines, last_tag, acked_tag = [], None, None
        if remaining > 0:
            ch.basic_qos(prefetch_count=1000)
            for method, props, body in ch.consume(rest[0], auto_ack=False, inactivity_timeout=10):
                if method is None:  # nothing for 10 s: others took some
                    break
                headers = props.headers
                lines.append(json.dumps({
                    "body": body.decode("utf-8", "replace"),
                    "message_id": props.message_id,
                    "type": props.type,
                    "content_type": props.content_type,
                    "app_id": props.app_id,
                    "delivery_mode": props.delivery_mode,
                    "timestamp": props.timestamp,
                    "headers": None if headers is None else {k: text(v) for k, v in headers.items()},
                    "header_names": None if headers is None else list(headers.keys()),
                }, sort_keys=True))
                last_tag = method.delivery_tag
                if len(lines) % 500 == 0:
                    ch.basic_ack(last_tag, multiple=True)
                    acked_tag = last_tag
                if len(lines) >= remaining:
                    break
            if last_tag is not None and last_tag != acked_tag:
                ch.basic_ack(last_tag, multiple=True)
            ch.cancel()
        if lines:
            print("\n".join(lines))
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        return 1
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
