"""A case's ports (``{port}``): picked where no other program picks, and held machine-wide until
the case ends.

``bind(("127.0.0.1", 0))`` hands out a port of the kernel's ephemeral range, where every other
program's ``bind(0)`` lands too.  Closed again and left to a service that takes seconds to
listen (a database replaying its log), such a port can be taken meanwhile by another program for a
moment, and the service's ``tcp:`` probe then passes on that program's listener: the services
started after it find nothing there.  So on Linux a case's ports come from below the ephemeral
range (``/proc/sys/net/ipv4/ip_local_port_range``), which only programs asking for that very
port use, and each is held by an abstract Unix socket named after it (no file; gone with the
process that holds it, even on SIGKILL): two harnesses (pytest-xdist workers, two drills) never
hand out one port at once, and one case never gets one port twice.  Elsewhere, or with no room
below the range, the kernel's pick (``bind(0)``), never one port twice in a case either."""

from __future__ import annotations

import contextlib
import random
import socket
import sys

from killdrill.process.readiness import free_port

LOWEST = 10000  # below: the well-known services' ports (PostgreSQL 5432, Redis 6379, AMQP 5672...)
_TRIES = 200
_pick = random.SystemRandom()  # not the harness's seeded ``random``: a chaos run's draws stay its own


def _ephemeral() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
        return low, high
    return 32768, 60999


def _hold(port: int) -> socket.socket | None:
    """The machine-wide hold on ``port`` (an abstract Unix socket), or None if another has it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0killdrill-port-{port}".encode())
    except OSError:
        sock.close()
        return None
    return sock


def _free(port: int) -> bool:
    """Nothing is bound to ``port`` on the loopback (nor on every address): it can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Ports:
    """The ports picked for one case, held until :meth:`release` (its end)."""

    def __init__(self) -> None:
        self.held: dict[int, socket.socket | None] = {}  # port -> its hold (None: the kernel's pick)

    def pick(self) -> int:
        """A port free now that no other harness holds and this case has not had."""
        low, _ = _ephemeral()
        if sys.platform.startswith("linux") and low - LOWEST >= 1000:
            for _ in range(_TRIES):
                port = _pick.randrange(LOWEST, low)
                if port in self.held:
                    continue
                hold = _hold(port)
                if hold is None:
                    continue
                if _free(port):
                    self.held[port] = hold
                    return port
                hold.close()
        while True:  # no room below the range (or no abstract sockets): the kernel's pick
            port = free_port()
            if port not in self.held:
                self.held[port] = None
                return port

    def release(self) -> None:
        """The case is over: its ports may be handed out again."""
        for sock in self.held.values():
            if sock is not None:
                sock.close()
        self.held.clear()
