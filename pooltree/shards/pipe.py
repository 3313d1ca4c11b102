"""A node shard process's end of its pipe to the leader, read and written on the shard's event loop.

The leader's end is a ``multiprocessing.connection.Connection`` (``host.NodeShards``); its frames are a 4-byte
big-endian signed length (-1: an 8-byte unsigned length follows) and a pickle of the message. ``LoopPipe`` reads
them on the event loop as the pipe becomes readable (``loop.add_reader``; each wake-up takes what is there in one
``recv`` that never blocks, ``MSG_DONTWAIT``, and hands every whole message to ``deliver`` in order), so a reply
reaches its waiting heartbeat without a reader thread, its hand-over to the loop (``call_soon_threadsafe``, the
loop's self-pipe) and the two threads' contention for the interpreter. ``send`` writes a message as the one frame
``Connection.send`` writes, pickled by ``pickle.dumps`` (C) instead of ``Connection.send``'s Python pickler set up
per message; the leader's ``Connection.recv`` reads it alike. End of file (the leader died or closed the shard)
calls ``ended``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import struct
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

READ_BYTES = 1 << 18
"""The most one wake-up reads off the pipe (what is left is read at the next one)."""
_SIZE = struct.Struct("!i")
_LONG_SIZE = struct.Struct("!Q")
_LONG = -1
"""The 4-byte length of a frame whose length is in the 8 bytes that follow (a payload over 2 GiB)."""
_BIG = 0x7FFFFFFF


def frame(message: Any) -> bytes:
    """``message`` as ``Connection.send`` frames it (header and pickle; a payload past ``_BIG`` as the long form)."""
    payload = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    if len(payload) > _BIG:
        return _SIZE.pack(_LONG) + _LONG_SIZE.pack(len(payload)) + payload
    return _SIZE.pack(len(payload)) + payload


class Frames:
    """Whole messages out of the bytes read so far (``feed``); a frame cut by a read waits for the rest."""

    def __init__(self) -> None:
        self._held = b""

    def feed(self, data: bytes) -> list[Any]:
        """The messages that ``data`` completes, in order."""
        if self._held:
            data = self._held + data
        messages = []
        view = memoryview(data)
        end = len(data)
        at = 0
        while end - at >= 4:
            (size,) = _SIZE.unpack_from(data, at)
            head = 4
            if size == _LONG:
                if end - at < 12:
                    break
                (size,) = _LONG_SIZE.unpack_from(data, at + 4)
                head = 12
            elif size < 0:
                raise ValueError(f"a frame of negative length {size} on the leader's pipe")
            if end - at - head < size:
                break
            messages.append(pickle.loads(view[at + head : at + head + size]))
            at += head + size
        view.release()
        self._held = data[at:] if at < end else b""
        return messages

    @property
    def holding(self) -> int:
        """Bytes of a frame not yet whole."""
        return len(self._held)


class LoopPipe:
    """The shard's end of ``conn`` on ``loop``: messages to ``deliver`` as they arrive, ``ended()`` at end of file
    or a broken pipe; ``send`` writes (blocking, as ``Connection.send``: the leader reads its pipe all the time)."""

    def __init__(
        self,
        conn: Connection,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Any], None],
        ended: Callable[[], None],
    ) -> None:
        self._conn = conn
        self._sock = socket.socket(fileno=os.dup(conn.fileno()))
        self._loop = loop
        self._deliver = deliver
        self._ended = ended
        self._frames = Frames()
        loop.add_reader(self._sock.fileno(), self._readable)

    def send(self, message: Any) -> None:
        """``message`` to the leader; OSError when the pipe is broken."""
        self._sock.sendall(frame(message))

    def close(self) -> None:
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    def _readable(self) -> None:
        try:
            data = self._sock.recv(READ_BYTES, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._loop.remove_reader(self._sock.fileno())
            self._ended()
            return
        try:
            messages = self._frames.feed(data)
        except Exception:  # not the leader's frames: nothing after it can be read
            log.exception("the leader's pipe carried what is not a message")
            self._loop.remove_reader(self._sock.fileno())
            self._ended()
            return
        for message in messages:
            try:
                self._deliver(message)
            except Exception:
                log.exception("a message from the leader failed in the shard")
