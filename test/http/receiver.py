#!/usr/bin/python3
"""A webhook receiver for the TAP tests (python3-aiohttp).

    receiver.py PORT DIR

Listens on 127.0.0.1:PORT and records every request it answers as one JSON
line in DIR/received.jsonl: {"path", "headers" (names in lower case),
"body", "status", "at"}. How it answers is DIR/rules.json, read again for
every request (the test rewrites it; absent means 200 at once):

    {"delay_ms": 0,                   answer slowly
     "status": 200,                   every answer's status
     "retry_after": "2",              sent with every non-2xx answer
     "fail_ids": {"<webhook-id>": 500},   a status for chosen events
     "fail_bodies": {"<text>": 500},      a status for bodies holding the text
     "down_paths": {"/hooks/b": 503},     a status for chosen paths
     "drop_paths": ["/hooks/c"],          close the connection unanswered
     "drop_all": false}

GET /_ready answers 200 (not recorded), for the harness's start-up check.
"""
import asyncio
import json
import os
import sys
import time

from aiohttp import web

PORT = int(sys.argv[1])
DIR = sys.argv[2]
RULES = os.path.join(DIR, "rules.json")
LOG = os.path.join(DIR, "received.jsonl")


def rules():
    try:
        with open(RULES, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def record(request, body, status):
    entry = {
        "path": request.raw_path,
        "method": request.method,
        "headers": {k.lower(): v for k, v in request.headers.items()},
        "body": body.decode("utf-8", errors="replace"),
        "status": status,
        "at": time.time(),
    }
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


async def handle(request):
    if request.method == "GET" and request.path == "/_ready":
        return web.Response(text="ready")
    body = await request.read()
    r = rules()
    if r.get("drop_all") or request.path in r.get("drop_paths", []):
        record(request, body, 0)
        request.transport.close()
        raise asyncio.CancelledError()
    if r.get("delay_ms"):
        await asyncio.sleep(r["delay_ms"] / 1000.0)
    status = int(r.get("status", 200))
    wid = request.headers.get("webhook-id", "")
    if wid in r.get("fail_ids", {}):
        status = int(r["fail_ids"][wid])
    for needle, code in r.get("fail_bodies", {}).items():
        if needle.encode("utf-8") in body:
            status = int(code)
    if request.path in r.get("down_paths", {}):
        status = int(r["down_paths"][request.path])
    headers = {}
    if status >= 300 and "retry_after" in r:
        headers["Retry-After"] = str(r["retry_after"])
    if status in (301, 302, 307, 308) and "location" in r:
        headers["Location"] = r["location"]
    record(request, body, status)
    return web.Response(status=status, text="status %d for %s" % (status, wid), headers=headers)


app = web.Application(client_max_size=64 * 1024 * 1024)
app.router.add_route("*", "/{tail:.*}", handle)
web.run_app(app, host="127.0.0.1", port=PORT, access_log=None, print=None,
            handle_signals=True)
