"""Server CPU per request of the heartbeat listener's possible transports, without a scheduler; prints JSON.

A server process answers a fixed ~1.2 KB body to each ~5 KB request (a loaded heartbeat's sizes) from ``--conns``
keep-alive connections of a client process, paced at ``--rate`` requests/s in all (0: as fast as answered); its
user and system CPU (psutil) per request over ``--seconds``, for each ``--kinds``:

* ``uvicorn``: uvicorn with the scheduler's ``BoundedHeadersProtocol`` and a trivial ASGI app;
* ``heartbeat``: the heartbeat listener's ``HeartbeatProtocol`` (``pooltree/server/heartbeat_protocol.py``), same app;
* ``httptools``: a bare httptools parser answering the bytes itself (what HTTP parsing alone costs);
* ``frames``: length-prefixed frames on an asyncio protocol (what a framed RPC transport would cost).

Usage: .venv/bin/python bench/heartbeat_transport.py [--kinds uvicorn,heartbeat,httptools,frames] [--conns 300]
       [--rate 600] [--seconds 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import socket
import struct
import sys
import time
from pathlib import Path

import httptools
import psutil
import uvicorn
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.server.heartbeat_protocol import HeartbeatProtocol
from pooltree.server.http_protocol import BoundedHeadersProtocol

BODY = b'{"address":"node-1","x":"' + b"a" * 5000 + b'"}'
ANSWER = b'{"acknowledge":[],"start":[],"y":"' + b"b" * 1200 + b'"}'


def serve(kind: str, port_out: object) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port_out.put(sock.getsockname()[1])  # type: ignore[attr-defined]
    if kind.startswith("uvicorn") or kind == "heartbeat":
        headers = [(b"content-length", b"%d" % len(ANSWER)), (b"content-type", b"application/json")]

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": ANSWER})

        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            http={"uvicorn": BoundedHeadersProtocol, "heartbeat": HeartbeatProtocol}.get(kind, "httptools"),
            proxy_headers=False,
            access_log=False,
        )
        uvicorn.Server(config).run(sockets=[sock])
        return
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    if kind == "frames":

        class Frames(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport
                self.buffer = bytearray()

            def data_received(self, data):
                buffer = self.buffer
                buffer += data
                while len(buffer) >= 4:
                    (size,) = struct.unpack_from("!I", buffer)
                    if len(buffer) < 4 + size:
                        return
                    body = bytes(buffer[4 : 4 + size])
                    del buffer[: 4 + size]
                    self.handle(body)

            def handle(self, body):
                self.transport.write(struct.pack("!I", len(ANSWER)) + ANSWER)

        factory = Frames
    else:

        class Http(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport
                self.parser = httptools.HttpRequestParser(self)
                self.body = []

            def data_received(self, data):
                self.parser.feed_data(data)

            def on_header(self, name, value):
                pass

            def on_body(self, body):
                self.body.append(body)

            def on_message_complete(self):
                self.body = []
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                    % len(ANSWER)
                    + ANSWER
                )

        factory = Http

    async def main():
        server = await loop.create_server(factory, sock=sock)
        await server.serve_forever()

    loop.run_until_complete(main())


def client(kind: str, port: int, conns: int, seconds: float, out: object, rate: float = 0.0) -> None:
    async def one(counter: list[int], end: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (
            b"POST /internal/node_heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"X-Pooltree-Node-Secret: abcdefabcdefabcdef\r\nContent-Length: %d\r\n\r\n" % len(BODY)
        )
        period = conns / rate if rate else 0.0
        slot = time.time() + random.random() * period
        while time.time() < end:
            if period:
                await asyncio.sleep(max(0.0, slot - time.time()))
                slot += period
            if kind == "frames":
                writer.write(struct.pack("!I", len(BODY)) + BODY)
                (size,) = struct.unpack("!I", await reader.readexactly(4))
                await reader.readexactly(size)
            else:
                writer.write(head + BODY)
                length = 0
                while True:
                    line = await reader.readline()
                    if line == b"\r\n":
                        break
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
            counter[0] += 1
        writer.close()

    async def main():
        counter = [0]
        end = time.time() + seconds
        await asyncio.gather(*(one(counter, end) for _ in range(conns)))
        out.put(counter[0])  # type: ignore[attr-defined]

    uvloop.run(main())


def measure(kind: str, conns: int, seconds: float, rate: float) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    server = ctx.Process(target=serve, args=(kind, q), daemon=True)
    server.start()
    port = q.get(timeout=30)
    time.sleep(0.5)
    proc = psutil.Process(server.pid)
    c = ctx.Process(target=client, args=(kind, port, conns, 0.5, q))
    c.start()
    q.get(timeout=30)
    c.join()
    before = proc.cpu_times()
    c = ctx.Process(target=client, args=(kind, port, conns, seconds, q, rate))
    c.start()
    count = q.get(timeout=seconds + 30)
    after = proc.cpu_times()
    c.join()
    server.kill()
    server.join()
    user = after.user - before.user
    system = after.system - before.system
    return {
        "kind": kind,
        "messages": count,
        "user_us": round(1e6 * user / count, 1),
        "system_us": round(1e6 * system / count, 1),
        "total_us": round(1e6 * (user + system) / count, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default="uvicorn,heartbeat,httptools,frames")
    parser.add_argument("--conns", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rate", type=float, default=600.0)
    args = parser.parse_args()
    results = []
    for _ in range(args.repeat):
        for kind in args.kinds.split(","):
            results.append(measure(kind, args.conns, args.seconds, args.rate))
    print(json.dumps({"load": os.getloadavg()[0], "runs": results}, indent=1))
