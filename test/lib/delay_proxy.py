#!/usr/bin/env python3
# A TCP relay on loopback that holds every chunk DELAY_MS before passing it
# on, in each direction: a broker as far away as one in another zone, for
# the tests that measure what waiting on it costs others. It writes READY_FILE
# (when given) once it listens; a connection closed on one side is closed on
# the other once what was in transit has been delivered.
#
#   delay_proxy.py LISTEN_PORT UPSTREAM_PORT DELAY_MS [READY_FILE]
import asyncio
import sys
import time


async def relay(reader, writer, delay):
    chunks = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await chunks.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            await writer.drain()
        writer.close()

    delivering = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            chunks.put_nowait((time.monotonic() + delay, data))
    except (ConnectionError, OSError):
        pass
    chunks.put_nowait((time.monotonic() + delay, None))
    try:
        await delivering
    except (ConnectionError, OSError):
        pass


async def main():
    listen_port, upstream_port = int(sys.argv[1]), int(sys.argv[2])
    delay = float(sys.argv[3]) / 1000.0

    async def accept(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection('127.0.0.1', upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(relay(client_reader, up_writer, delay),
                             relay(up_reader, client_writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(accept, '127.0.0.1', listen_port)
    if len(sys.argv) > 4:
        open(sys.argv[4], 'w').close()
    async with server:
        await server.serve_forever()


asyncio.run(main())
