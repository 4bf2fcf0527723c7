#!/usr/bin/python3
"""A subscriber for the MQTT sink's TAP tests (test/lib/OutboxMosquitto.pm).

Debian's python3-paho-mqtt, a client the project did not write, subscribes
at QoS 1 to the given filters and appends each message to OUT as one JSON
line: {"topic", "body", "content_type", "correlation", "properties": [[name,
value], ...]}, in the order it received them. It reconnects (and
resubscribes) on its own when the broker goes away, and writes "ready" to
OUT.ready once its first subscription is granted. With MQTT 5 its session
outlives its connection (clean start off, an hour's expiry), so what the
broker takes while the subscriber reconnects waits for it.

    mqtt_tool.py --port 1883 --out FILE [--protocol 5|3.1.1] FILTER...
"""
import argparse
import json
import os
import sys
import time
import traceback

import paho.mqtt.client as mqtt


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--protocol", default="5")
    parser.add_argument("filters", nargs="+")
    args = parser.parse_args()
    v5 = args.protocol == "5"
    out = open(args.out, "a", encoding="utf-8")
    client = mqtt.Client(client_id="outbox-tap-subscriber",
                         protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
                         **({} if v5 else {"clean_session": True}))

    def on_connect(c, userdata, flags, rc, properties=None):
        c.subscribe([(f, 1) for f in args.filters])

    def on_subscribe(c, userdata, mid, granted, properties=None):
        with open(args.out + ".ready", "w", encoding="utf-8") as ready:
            ready.write("ready\n")

    def on_message(c, userdata, msg):
        record = {"topic": msg.topic,
                  "body": msg.payload.decode("utf-8", "replace"),
                  "content_type": None, "correlation": None, "properties": []}
        props = getattr(msg, "properties", None)
        if props is not None:
            record["content_type"] = getattr(props, "ContentType", None)
            corr = getattr(props, "CorrelationData", None)
            record["correlation"] = corr.decode("utf-8", "replace") if corr else None
            record["properties"] = [list(p) for p in getattr(props, "UserProperty", [])]
        out.write(json.dumps(record) + "\n")
        out.flush()

    def on_disconnect(c, userdata, *rest):
        # Said in the subscriber's log, which a failed test shows.
        print("subscriber: disconnected", *rest, file=sys.stderr, flush=True)

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.on_disconnect = on_disconnect
    client.reconnect_delay_set(min_delay=1, max_delay=1)
    connect_args = {}
    if v5:
        # A session that outlives the connection (and, with the broker's
        # persistence, a restart of the broker): what is published while the
        # subscriber reconnects waits for it instead of being dropped.
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        connect_args = {"clean_start": False, "properties": props}
    while True:
        try:
            client.connect("127.0.0.1", args.port, keepalive=10, **connect_args)
            break
        except OSError:
            time.sleep(0.2)
    # The test decides when the subscriber ends (it kills it). Whatever ends
    # paho's loop (a broker's DISCONNECT on shutdown that leaves the client
    # "disconnected", an exception in a callback) is logged, and the
    # subscriber connects again: its session keeps what the broker took.
    while True:
        try:
            client.loop_forever(retry_first_connection=True)
            print("subscriber: the network loop ended; connecting again",
                  file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 (logged, then the loop goes on)
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
        while True:
            time.sleep(0.5)
            try:
                client.reconnect()
                break
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main())
