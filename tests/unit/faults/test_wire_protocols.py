"""The fault proxy's reading of a byte stream: whole messages however the bytes arrive (one at a
time here), a client's COMMIT in a simple query or a Parse, a server's CommandComplete COMMIT
(not ROLLBACK), TLS declined in the server's place; Redis command names and their replies paired
in order, a RESP3 push paired with nothing."""

from __future__ import annotations

import struct

from killdrill.faults.wire_protocols import Message, Protocol, protocol


def _typed(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _startup() -> bytes:
    body = struct.pack("!i", 196608) + b"user\0postgres\0\0"
    return struct.pack("!i", len(body) + 4) + body


def _feed(side: str, proto: Protocol, data: bytes) -> list[Message]:
    """``data`` handed over one byte at a time, as the slowest network would."""
    buffer, out = bytearray(), []
    for i in range(len(data)):
        buffer += data[i : i + 1]
        out += proto.client(buffer) if side == "client" else proto.server(buffer)
    assert not buffer
    return out


def test_a_commit_is_recognized_in_a_simple_query_and_in_a_parse() -> None:
    stream = (
        _startup()
        + _typed(b"Q", b"INSERT INTO t VALUES (1)\0")
        + _typed(b"Q", b"  commit ;\0")
        + _typed(b"P", b"\0END TRANSACTION\0\0\0")
        + _typed(b"Q", b"COMMIT PREPARED 'x'\0")
    )
    ops = [m.op for m in _feed("client", protocol("postgres"), stream)]
    assert ops == [None, None, "commit", "commit", None]


def test_the_server_commit_is_its_command_complete_tag_not_a_rollback() -> None:
    stream = (
        _typed(b"C", b"INSERT 0 1\0")
        + _typed(b"C", b"ROLLBACK\0")
        + _typed(b"C", b"COMMIT\0")
        + _typed(b"Z", b"I")
    )
    messages = _feed("server", protocol("postgres"), stream)
    assert [m.op for m in messages] == [None, None, "commit", None]
    assert b"".join(m.data for m in messages) == stream


def test_tls_is_answered_no_by_the_proxy_and_not_forwarded() -> None:
    ssl = struct.pack("!ii", 8, 80877103)
    messages = _feed("client", protocol("postgresql"), ssl + _startup())
    assert messages[0].reply == b"N"
    assert messages[1].reply is None and messages[1].data == _startup()


def test_redis_commands_and_their_replies_pair_in_order() -> None:
    proto = protocol("redis")
    commands = b"*1\r\n$5\r\nMULTI\r\n*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n*1\r\n$4\r\nEXEC\r\nPING\r\n"
    assert [m.op for m in _feed("client", proto, commands)] == ["multi", "incr", "exec", "ping"]
    replies = b"+OK\r\n+QUEUED\r\n>2\r\n$7\r\nmessage\r\n$1\r\nx\r\n*1\r\n:2\r\n+PONG\r\n"
    assert [m.op for m in _feed("server", proto, replies)] == ["multi", "incr", None, "exec", "ping"]


def test_bytes_of_an_unread_protocol_pass_as_they_come() -> None:
    assert [m.data for m in _feed("client", protocol("amqp"), b"AMQP\0\0\x09\x01")] == [
        b"A", b"M", b"Q", b"P", b"\0", b"\0", b"\x09", b"\x01"
    ]  # fmt: skip
