"""The listen mark: each ``socket.listen()`` of a deployment's service appends ``PID PORT`` to the
file ``KILLDRILL_LISTEN_MARK`` names, which the harness watches (``drill.service_watch``): the
port's probe is tried as the port opens, not on the next tick of a timer.

Installed by the bootstrap in a spawned service and by the fork template in a forked one, only
when the variable is set.  The listen itself is untouched and the mark never raises into the
service; the file is never created here (a missing one means the harness is gone); a child the
service forks inherits the wrapper; installing it again (a reload, a forked launch of a template
that had it) wraps nothing twice, and the file is read from the environment at each listen.

Layer: agent; the standard library and ``killdrill.envvars`` only.
"""

from __future__ import annotations

import os
import socket

from killdrill.envvars import LISTEN_MARK


def install() -> None:
    """Wrap ``socket.socket.listen`` once so that each listen marks the file ``LISTEN_MARK`` names."""
    listen = socket.socket.listen
    if getattr(listen, "_killdrill_mark", False):
        return

    def listen_marked(self: socket.socket, *args: int) -> None:
        listen(self, *args)
        path = os.environ.get(LISTEN_MARK)
        if not path:
            return
        try:
            port = self.getsockname()[1] if self.family in (socket.AF_INET, socket.AF_INET6) else 0
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)  # never created here
            try:
                os.write(fd, f"{os.getpid()} {port}\n".encode())
            finally:
                os.close(fd)
        except Exception:
            pass

    listen_marked._killdrill_mark = True  # type: ignore[attr-defined]
    socket.socket.listen = listen_marked  # type: ignore[method-assign,assignment]
