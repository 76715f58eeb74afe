"""Which process is on the other end of a loopback TCP connection (Linux ``/proc``), so a call
to a served fake (HTTP or SMTP) is recorded with its caller's pid, as an in-process call is.

The fakes cannot ask the caller (an SDK sends no pid, and a caller-given pid is forgeable): the
kernel knows.  The client's socket is found in ``/proc/net/tcp`` (local address = the peer the
server saw, remote = the server's own address), then the process holding that socket inode in
``/proc/PID/fd``.  Newest pids are scanned first (the agent is young); only our own processes
can be read, which is every process a drill starts.  Anywhere this cannot work (no ``/proc``,
another network or pid namespace) the answer is 0, as before.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator

__all__ = ["client_uids", "peer_pid"]

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _hex_address(host: str, port: int) -> set[str]:
    """How ``/proc/net/tcp{,6}`` writes ``host:port`` (IPv4, and IPv4-mapped IPv6)."""
    try:
        packed = socket.inet_aton(host)
    except OSError:
        return set()
    v4 = f"{struct.unpack('<I', packed)[0]:08X}"
    v6 = "0000000000000000FFFF0000" + v4
    return {f"{v4}:{port:04X}", f"{v6}:{port:04X}"}


def _rows(server: tuple[str, int]) -> Iterator[list[str]]:
    """The rows of ``/proc/net/tcp{,6}`` whose remote end is ``server`` (local address in field 1,
    uid in field 7, inode in field 9)."""
    remote = _hex_address(str(server[0]), int(server[1]))
    for table in _TABLES:
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[2] in remote:
                        yield fields
        except OSError:
            continue


def _client_inode(client: tuple[str, int], server: tuple[str, int]) -> str | None:
    local = _hex_address(*client)
    row = next((r for r in _rows(server) if r[1] in local), None)
    return row[9] if row is not None and row[9] != "0" else None


def client_uids(server: tuple[str, int]) -> dict[tuple[str, int], int]:
    """The uid owning each client end connected to ``server`` (IPv4 loopback clients), read in one
    pass: the kernel writes it, a client cannot forge it."""
    out: dict[tuple[str, int], int] = {}
    for fields in _rows(server):
        try:
            host, port = fields[1].rsplit(":", 1)
            packed = struct.pack("<I", int(host[-8:], 16))
            out[(socket.inet_ntoa(packed), int(port, 16))] = int(fields[7])
        except ValueError:
            continue
    return out


def peer_pid(client: tuple[str, int], server: tuple[str, int]) -> int:
    """The pid of the process holding the client end of ``client`` -> ``server``, else 0."""
    try:
        inode = _client_inode((str(client[0]), int(client[1])), (str(server[0]), int(server[1])))
        if inode is None:
            return 0
        target = f"socket:[{inode}]"
        pids = sorted((int(p) for p in os.listdir("/proc") if p.isdigit()), reverse=True)
    except (OSError, ValueError, IndexError, TypeError):
        return 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return pid
            except OSError:
                continue
    return 0
