"""What the fault proxy recognizes in a dependency's byte stream: the framing of each protocol it
knows and the operations whose answer it can lose (:mod:`killdrill.faults.proxy`).

A protocol splits each direction into whole messages and names the few that matter:

- ``postgres`` (the PostgreSQL frontend/backend protocol, v3): a client's ``COMMIT``/``END`` (in a
  simple query ``Q`` or an extended-protocol ``Parse``) is the request of op ``commit``; the
  server's ``CommandComplete`` tagged ``COMMIT`` is its answer, sent once the transaction is
  durable.  A client's ``SSLRequest``/``GSSENCRequest`` is answered ``N`` by the proxy itself,
  so the session stays plaintext and readable (a client that *requires* TLS fails to connect:
  said in one line by its driver).
- ``redis`` (RESP): every command array's name, lower case (``set``, ``lpush``, ``exec``), is the
  request of that op; the next reply is its answer (replies come in request order).
- ``tcp``: bytes, no operations: only the whole-connection faults apply.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from killdrill.options.proxies import SCHEMES

__all__ = ["PROTOCOLS", "Message", "Protocol", "protocol"]

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
_COMMIT_SQL = re.compile(rb"^\s*(?:COMMIT|END)(?:\s+(?:WORK|TRANSACTION))?\s*;?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Message:
    """One whole message of a direction: its bytes, the op it requests or answers (None: none the
    proxy acts on), and for a client's message the bytes the proxy answers in the server's place
    (``reply``: the message is not forwarded)."""

    data: bytes
    op: str | None = None
    reply: bytes | None = None


class Protocol:
    """The framing of one connection, both directions (state: where each stream is)."""

    name = "tcp"
    announces: frozenset[str] = frozenset()
    """The ops whose answer is announced as ``during:NAME.OP`` (a point: the dependency did it,
    the client has not heard)."""

    def client(self, buffer: bytearray) -> list[Message]:
        """Whole messages from the client at the front of ``buffer`` (taken out of it)."""
        data = bytes(buffer)
        buffer.clear()
        return [Message(data)] if data else []

    def server(self, buffer: bytearray) -> list[Message]:
        """Whole messages from the server at the front of ``buffer`` (taken out of it)."""
        return self.client(buffer)


class Postgres(Protocol):
    """The PostgreSQL v3 protocol: the startup packet (no type byte), then typed messages."""

    name = "postgres"
    announces = frozenset({"commit"})

    def __init__(self) -> None:
        self.started = False  # the client sent its startup packet (typed messages follow)

    def client(self, buffer: bytearray) -> list[Message]:
        out: list[Message] = []
        while True:
            if not self.started:
                if len(buffer) < 8:
                    return out
                (length,) = struct.unpack_from("!i", buffer, 0)
                if length < 8 or len(buffer) < length:
                    if length < 8:  # not PostgreSQL: pass the bytes through untouched
                        out.append(Message(bytes(buffer)))
                        buffer.clear()
                    return out
                data = bytes(buffer[:length])
                del buffer[:length]
                (code,) = struct.unpack_from("!i", data, 4)
                if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                    out.append(Message(data, reply=b"N"))  # plaintext: the proxy must read COMMIT
                    continue
                self.started = code != _CANCEL_REQUEST
                out.append(Message(data))
                continue
            typed = _typed(buffer)
            if typed is None:
                return out
            out.append(Message(typed, "commit" if _is_commit(typed) else None))

    def server(self, buffer: bytearray) -> list[Message]:
        out: list[Message] = []
        while (data := _typed(buffer)) is not None:
            tag = data[5:].split(b"\0", 1)[0] if data[:1] == b"C" else b""
            out.append(Message(data, "commit" if tag == b"COMMIT" else None))
        return out


def _typed(buffer: bytearray) -> bytes | None:
    """One typed message (type byte, int32 length counting itself, body) off ``buffer``."""
    if len(buffer) < 5:
        return None
    (length,) = struct.unpack_from("!i", buffer, 1)
    end = 1 + max(length, 4)
    if len(buffer) < end:
        return None
    data = bytes(buffer[:end])
    del buffer[:end]
    return data


def _is_commit(message: bytes) -> bool:
    """A simple query ``COMMIT``/``END``, or an extended-protocol ``Parse`` of one."""
    kind, body = message[:1], message[5:]
    if kind == b"Q":
        return _COMMIT_SQL.match(body.rstrip(b"\0")) is not None
    if kind == b"P":
        parts = body.split(b"\0", 2)
        return len(parts) > 1 and _COMMIT_SQL.match(parts[1]) is not None
    return False


class Redis(Protocol):
    """RESP: command arrays from the client (inline commands pass through as they are), one reply
    per command from the server, in order."""

    name = "redis"
    announces = frozenset({"exec"})  # a MULTI/EXEC transaction applied (not every command: a poll loop)

    def __init__(self) -> None:
        self.asked: list[str | None] = []  # the op of each command still unanswered

    def client(self, buffer: bytearray) -> list[Message]:
        out: list[Message] = []
        while buffer:
            end, op = _resp_command(buffer)
            if end is None:
                return out
            data = bytes(buffer[:end])
            del buffer[:end]
            self.asked.append(op)
            out.append(Message(data, op))
        return out

    def server(self, buffer: bytearray) -> list[Message]:
        out: list[Message] = []
        while buffer:
            end = _resp_value(buffer, 0)
            if end is None:
                return out
            data = bytes(buffer[:end])
            del buffer[:end]
            op = self.asked.pop(0) if self.asked else None
            if data[:1] == b">":  # a RESP3 push answers no command
                if op is not None:
                    self.asked.insert(0, op)
                op = None
            out.append(Message(data, op))
        return out


def _line(buffer: bytearray, start: int) -> int | None:
    end = buffer.find(b"\r\n", start)
    return None if end < 0 else end


def _resp_value(buffer: bytearray, start: int) -> int | None:
    """The end of the RESP value at ``start`` (None: not whole yet)."""
    eol = _line(buffer, start)
    if eol is None:
        return None
    kind, head = bytes(buffer[start : start + 1]), bytes(buffer[start + 1 : eol])
    after = eol + 2
    if kind in (b"$", b"=", b"!"):  # bulk string, verbatim, bulk error
        n = int(head or b"-1")
        if n < 0:
            return after
        return after + n + 2 if len(buffer) >= after + n + 2 else None
    if kind in (b"*", b"~", b">", b"%", b"|"):  # array, set, push, map, attribute
        n = int(head or b"-1")
        count = n * 2 if kind in (b"%", b"|") else n
        at: int | None = after
        for _ in range(max(count, 0)):
            assert at is not None
            at = _resp_value(buffer, at)
            if at is None:
                return None
        if kind == b"|" and at is not None:  # an attribute precedes the value it annotates
            return _resp_value(buffer, at)
        return at
    return after  # simple string, error, integer, null, double, boolean, big number; inline


def _resp_command(buffer: bytearray) -> tuple[int | None, str | None]:
    """The end and the command name of the client command at the front of ``buffer``."""
    end = _resp_value(buffer, 0)
    if end is None:
        return None, None
    if buffer[:1] != b"*":  # an inline command: its first word
        word = bytes(buffer[:end]).split(None, 1)
        return end, word[0].decode("latin-1").lower() if word else None
    eol = buffer.find(b"\r\n")
    first = eol + 2
    if buffer[first : first + 1] != b"$":
        return end, None
    name_eol = buffer.find(b"\r\n", first)
    n = int(buffer[first + 1 : name_eol])
    name = bytes(buffer[name_eol + 2 : name_eol + 2 + n])
    return end, name.decode("latin-1").lower()


PROTOCOLS: dict[str, type[Protocol]] = {"postgres": Postgres, "redis": Redis, "tcp": Protocol}
"""The protocols a proxy speaks, by the scheme of its upstream (``postgres://HOST:PORT``)."""
ALIASES = SCHEMES
"""Every scheme ``--proxy`` takes, as the protocol it is read as (``killdrill.options.proxies``)."""


def protocol(name: str) -> Protocol:
    """A fresh parser of ``name``'s protocol (one per connection: it keeps the stream's state)."""
    return PROTOCOLS[ALIASES.get(name, name)]()
