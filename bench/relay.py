#!/usr/bin/python3
"""bench/relay.py -- the polling relay outbox is measured against.

What a team writes when it hand-rolls the outbox pattern (the seeds in
../shared/seeds describe the same loop): every INTERVAL ms, in one
transaction, claim up to BATCH unsent rows of a plain table with
FOR UPDATE SKIP LOCKED, send them (XADD to a Redis stream in one pipeline,
or produce to a Kafka topic and wait for every acknowledgement), mark them
sent, commit. When a claim comes back full it
claims again at once (a backlog drains without waiting).

It is written to be cheap for a relay of its kind: the payload is fetched as
text (no JSON parsing in Python), the statements are short, one round trip
per statement, and the stream entry has the same fields as outbox's
(id, topic, key, payload, headers).

    relay.py DSN BROKER TARGET [INTERVAL_MS=50] [BATCH=500]

BROKER is a Redis port (`6379` or `redis:6379`: TARGET is the stream) or
`kafka:HOST:PORT[,...]` (TARGET is the topic; python3-confluent-kafka, the
record key is the row's key, acks=all, and a batch is marked sent only after
every record of it was acknowledged, as outbox does).

The table (created by the benchmark scripts):

    CREATE TABLE relay_outbox (id bigserial PRIMARY KEY, topic text NOT NULL,
        key text, payload jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        sent_at timestamptz);
    CREATE INDEX ON relay_outbox (id) WHERE sent_at IS NULL;

Runs until SIGTERM or SIGINT; prints "relay: N rows sent" when it stops.
"""
import signal
import sys
import time

import psycopg2

CLAIM = ("SELECT id, topic, key, payload::text FROM relay_outbox"
         " WHERE sent_at IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED")
MARK = "UPDATE relay_outbox SET sent_at = clock_timestamp() WHERE id = ANY(%s)"


class Ticker:
    """The relay's pace: a claim every interval, the next at once after a
    full one (bench/sink_relay.py paces itself with it too)."""

    def __init__(self, interval):
        self.interval = interval
        self.next_tick = time.monotonic()

    def delay(self, claimed, batch):
        """Seconds to wait before the next claim, after one of `claimed` rows."""
        if claimed == batch:
            return 0.0  # a backlog: claim the next batch at once
        self.next_tick += self.interval
        delay = self.next_tick - time.monotonic()
        if delay > 0:
            return delay
        self.next_tick = time.monotonic()
        return 0.0


class RedisOut:
    def __init__(self, port, stream):
        import redis
        self.r = redis.Redis(host="127.0.0.1", port=port)
        self.stream = stream

    def send(self, rows):
        pipe = self.r.pipeline(transaction=False)
        for row_id, topic, key, payload in rows:
            pipe.xadd(self.stream, {"id": str(row_id), "topic": topic, "key": key or "",
                                    "payload": payload, "headers": "{}"})
        pipe.execute()  # raises on any error: nothing is marked sent then


class KafkaOut:
    def __init__(self, bootstrap, topic):
        import confluent_kafka
        self.p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                           "linger.ms": 5})
        self.topic = topic

    def send(self, rows):
        failed = []

        def report(err, _msg):
            if err is not None:
                failed.append(err)
        for row_id, topic, key, payload in rows:
            while True:
                try:
                    self.p.produce(self.topic, value=payload, key=key,
                                   headers=[("id", str(row_id)), ("topic", topic)],
                                   on_delivery=report)
                    break
                except BufferError:  # the local queue is full: let it drain
                    self.p.poll(0.01)
        if self.p.flush(30) != 0 or failed:
            raise RuntimeError("kafka: %d records not acknowledged" % max(len(failed), 1))


def main():
    dsn, broker, target = sys.argv[1], sys.argv[2], sys.argv[3]
    interval = (int(sys.argv[4]) if len(sys.argv) > 4 else 50) / 1000.0
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 500
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))

    if broker.startswith("kafka:"):
        out = KafkaOut(broker[len("kafka:"):], target)
    else:
        out = RedisOut(int(broker[len("redis:"):] if broker.startswith("redis:") else broker),
                       target)
    db = psycopg2.connect(dsn)
    db.set_session(autocommit=False)
    cur = db.cursor()
    sent = 0
    ticker = Ticker(interval)
    while not stop:
        cur.execute(CLAIM, (batch,))
        rows = cur.fetchall()
        if rows:
            out.send(rows)
            cur.execute(MARK, ([row[0] for row in rows],))
            sent += len(rows)
        db.commit()
        delay = ticker.delay(len(rows), batch)
        if delay > 0:
            time.sleep(delay)
    print("relay: %d rows sent" % sent, flush=True)


if __name__ == "__main__":
    main()
