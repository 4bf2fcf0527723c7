#!/usr/bin/python3
"""bench/sink_relay.py -- the polling relay of bench/relay.py's design, into
RabbitMQ, an MQTT broker or a webhook endpoint, written with the clients a
team would pick in Python.

Every INTERVAL ms, in one transaction: claim up to BATCH unsent rows of
relay_outbox (the table of bench/relay.py) with FOR UPDATE SKIP LOCKED, send
them, wait until the server acknowledged every one of them, mark them sent,
commit. A full claim is followed by the next at once. A batch of which any
message was refused, or not acknowledged in time, is rolled back and claimed
again (at least once, as outbox).

    sink_relay.py DSN KIND ADDRESS TARGET [INTERVAL_MS=50] [BATCH=500] [CONNECTIONS=16]

KIND and ADDRESS:
  amqp  PORT          python3-pika (asyncio adapter) on 127.0.0.1:PORT, user
                      and password from OUTBOX_BENCH_AMQP_USER and
                      OUTBOX_BENCH_AMQP_PASSWORD; the channel in publisher-confirm
                      mode; persistent messages, mandatory, to the default
                      exchange with routing key TARGET (the queue). Every
                      message of a batch is published before the confirms are
                      awaited; a nack or a returned message fails the batch.
  mqtt  PORT          python3-paho-mqtt (MQTT 5, clean start) on 127.0.0.1:PORT,
                      QoS 1 to topic TARGET, up to 1,024 messages awaiting their
                      PUBACK at once (outbox's MQTT sink allows as many), and
                      no more than the broker's Receive Maximum (its CONNACK
                      says; mosquitto's max_inflight_messages, 20 by default),
                      which paho 1.6 does not enforce by itself and libmosquitto
                      does; the batch is marked once every PUBACK arrived.
  http  URL           python3-aiohttp: one POST of the payload per row to URL,
                      up to CONNECTIONS requests in flight (outbox's HTTP sink
                      defaults to 16), keep-alive; every answer must be 2xx.
                      TARGET is unused (the URL says where).

With DSN "-" there is no database: CEILING=N sends N messages of a fixed
payload in batches of BATCH (each awaited in full, as above) as fast as the
server acknowledges them, and prints "ceiling: N messages in S s (R/s)":
what the server takes from this client with no database in the way, the
bound any relay or outbox's sink meets (`CEILING=200000 sink_relay.py -
amqp PORT QUEUE 0 5000`).

Like relay.py it is written to be cheap: payloads are fetched as text and
sent as they are, one round trip per statement. Runs until SIGTERM or
SIGINT; prints "relay: N rows sent" when it stops.
"""
import asyncio
import os
import signal
import sys
import threading
import time

import psycopg2

from relay import CLAIM, MARK, Ticker
ACK_TIMEOUT = 30.0


class AmqpOut:
    """Publisher confirms, pipelined: a batch's messages all go out, then
    the batch waits for the broker's basic.ack of each (delivery tags count
    from 1 on a confirm-mode channel; an ack may cover every tag up to its
    own)."""

    def __init__(self, port, queue, _connections):
        self.port, self.queue = int(port), queue
        self.tag = 0
        self.waiting = set()
        self.failed = None
        self.done = None

    async def start(self):
        import pika
        from pika.adapters.asyncio_connection import AsyncioConnection
        self.pika = pika
        loop = asyncio.get_running_loop()
        opened = loop.create_future()
        params = pika.ConnectionParameters(
            host="127.0.0.1", port=self.port,
            credentials=pika.PlainCredentials(os.environ["OUTBOX_BENCH_AMQP_USER"],
                                              os.environ["OUTBOX_BENCH_AMQP_PASSWORD"]))
        AsyncioConnection(params, on_open_callback=opened.set_result,
                          on_open_error_callback=lambda _c, e: opened.set_exception(
                              RuntimeError("amqp: %r" % (e,))),
                          on_close_callback=self._lost, custom_ioloop=loop)
        self.conn = await opened
        channel = loop.create_future()
        self.conn.channel(on_open_callback=channel.set_result)
        self.ch = await channel
        self.ch.add_on_close_callback(self._lost)
        self.ch.add_on_return_callback(self._returned)
        confirming = loop.create_future()
        self.ch.confirm_delivery(self._confirmed, callback=confirming.set_result)
        await confirming

    def _lost(self, _what, reason):
        self.failed = "amqp: closed: %r" % (reason,)
        self._settle()

    def _returned(self, _ch, _method, _props, _body):
        self.failed = "amqp: a message was returned (no queue took it)"

    def _confirmed(self, frame):
        method = frame.method
        if isinstance(method, self.pika.spec.Basic.Nack):
            self.failed = "amqp: the broker refused a message (basic.nack)"
        if method.multiple:
            self.waiting = {t for t in self.waiting if t > method.delivery_tag}
        else:
            self.waiting.discard(method.delivery_tag)
        if not self.waiting:
            self._settle()

    def _settle(self):
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def send(self, rows):
        self.failed = None
        self.done = asyncio.get_running_loop().create_future()
        for row_id, _topic, _key, payload in rows:
            self.tag += 1
            self.waiting.add(self.tag)
            self.ch.basic_publish("", self.queue, payload.encode(),
                                  self.pika.BasicProperties(
                                      delivery_mode=2, content_type="application/json",
                                      message_id=str(row_id)),
                                  mandatory=True)
        await asyncio.wait_for(self.done, ACK_TIMEOUT)
        if self.failed:
            raise RuntimeError(self.failed)


class MqttOut:
    """paho's network thread sends and reads; the relay waits for each
    message's PUBACK (is_published) before marking the batch."""

    def __init__(self, port, topic, _connections):
        self.port, self.topic = int(port), topic

    async def start(self):
        import paho.mqtt.client as mqtt
        self.c = mqtt.Client(client_id="relay-%d" % os.getpid(), protocol=mqtt.MQTTv5)
        self.c.max_queued_messages_set(0)
        connected = threading.Event()

        def on_connect(client, _userdata, _flags, _rc, properties=None):
            # MQTT 5: a client keeps no more unacknowledged QoS 1 messages
            # than the server's Receive Maximum (65,535 when not sent).
            limit = getattr(properties, "ReceiveMaximum", 65535)
            client.max_inflight_messages_set(min(1024, limit))
            connected.set()
        self.c.on_connect = on_connect
        self.c.connect("127.0.0.1", self.port, keepalive=30, clean_start=True)
        self.c.loop_start()
        deadline = time.monotonic() + 10
        while not connected.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError("mqtt: no CONNACK")
            await asyncio.sleep(0.01)

    async def send(self, rows):
        infos = [self.c.publish(self.topic, payload, qos=1) for _i, _t, _k, payload in rows]
        for info in infos:
            info.wait_for_publish(ACK_TIMEOUT)
            if not info.is_published():
                raise RuntimeError("mqtt: no PUBACK (rc %d)" % info.rc)


class HttpOut:
    """One POST per row, all of a batch at once through a pool of at most
    CONNECTIONS keep-alive connections."""

    def __init__(self, url, _target, connections):
        self.url, self.connections = url, int(connections)

    async def start(self):
        import aiohttp
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.connections),
            timeout=aiohttp.ClientTimeout(total=ACK_TIMEOUT))

    async def post(self, row):
        row_id, topic, _key, payload = row
        headers = {"content-type": "application/json", "webhook-id": str(row_id),
                   "webhook-timestamp": str(int(time.time())), "relay-topic": topic}
        async with self.session.post(self.url, data=payload.encode(), headers=headers) as r:
            await r.read()
            if r.status // 100 != 2:
                raise RuntimeError("http: %d for row %d" % (r.status, row_id))

    async def send(self, rows):
        await asyncio.gather(*(self.post(row) for row in rows))


async def relay(out, dsn, interval, batch):
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await out.start()
    db = psycopg2.connect(dsn)
    db.set_session(autocommit=False)
    cur = db.cursor()
    sent = 0
    ticker = Ticker(interval)
    while not stop.is_set():
        cur.execute(CLAIM, (batch,))
        rows = cur.fetchall()
        if rows:
            try:
                await out.send(rows)
            except Exception as e:  # nothing of the batch is marked: claimed again
                db.rollback()
                print("relay: batch not delivered: %s" % e, file=sys.stderr, flush=True)
                await asyncio.sleep(1)
                continue
            cur.execute(MARK, ([row[0] for row in rows],))
            sent += len(rows)
        db.commit()
        delay = ticker.delay(len(rows), batch)
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
    print("relay: %d rows sent" % sent, flush=True)
    os._exit(0)  # paho's thread and aiohttp's pool need no orderly goodbye


async def ceiling(out, total, batch):
    await out.start()
    payload = '{"n": 1, "s": "0123456789abcdef"}'
    start = time.monotonic()
    sent = 0
    while sent < total:
        n = min(batch, total - sent)
        await out.send([(sent + i, "t", "k", payload) for i in range(n)])
        sent += n
    took = time.monotonic() - start
    print("ceiling: %d messages in %.2f s (%.0f/s)" % (sent, took, sent / took), flush=True)
    os._exit(0)


def main():
    dsn, kind, address, target = sys.argv[1:5]
    interval = (int(sys.argv[5]) if len(sys.argv) > 5 else 50) / 1000.0
    batch = int(sys.argv[6]) if len(sys.argv) > 6 else 500
    connections = sys.argv[7] if len(sys.argv) > 7 else "16"
    out = {"amqp": AmqpOut, "mqtt": MqttOut, "http": HttpOut}[kind](address, target, connections)
    if dsn == "-":
        asyncio.run(ceiling(out, int(os.environ.get("CEILING", "100000")), batch))
    else:
        asyncio.run(relay(out, dsn, interval, batch))


if __name__ == "__main__":
    main()
