"""Another local user forging a boundary on every killdrill control socket it can find.

    python forger.py POINT SECONDS [FLOOD]

Reads the world-readable ``/proc/net/unix`` for sockets whose name says killdrill, takes a
token from the name when there is one (an abstract name such as ``@killdrill-<token>``),
connects, says hello and announces ``POINT``.  It prints one line per socket it tried:
``forged NAME`` when the hello and the point were written, ``refused NAME: error`` otherwise,
then opens FLOOD more connections to it and holds them (``flooded NAME N``).
Stdlib only: it runs under any interpreter the other user can execute.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time

point, seconds = sys.argv[1], float(sys.argv[2])
flood = int(sys.argv[3]) if len(sys.argv) > 3 else 0
seen: set[str] = set()
held: list[socket.socket] = []
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    with open("/proc/net/unix") as f:
        names = [line.split()[-1] for line in f.readlines()[1:] if len(line.split()) >= 8]
    for name in names:
        if name in seen or not re.search(r"killdrill|/ctl|kd-", name):
            continue
        seen.add(name)
        token = re.search(r"[0-9a-f]{32}", name)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect("\0" + name[1:] if name.startswith("@") else name)
            hello = {"token": token.group(0) if token else "guess", "pid": 1, "thread": "x"}
            s.sendall(json.dumps(hello).encode() + b"\n" + json.dumps({"point": point}).encode() + b"\n")
            held.append(s)
            print("forged", name, flush=True)
        except OSError as exc:
            print(f"refused {name}: {exc}", flush=True)
            s.close()
            continue
        opened = 0
        for _ in range(flood):
            extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

            try:
                extra.connect("\0" + name[1:] if name.startswith("@") else name)
                held.append(extra)
                opened += 1
            except OSError:
                extra.close()
                break
        if flood:
            print("flooded", name, opened, flush=True)
    time.sleep(0.002)
