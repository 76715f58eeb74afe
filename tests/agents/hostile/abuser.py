"""An agent that abuses its own control channel between two boundaries.

    python abuser.py nested|flood|pipeline|oneway [MARKER]

It abuses only in resumed attempts (``KILLDRILL_ATTEMPT`` > 1): the clean run and the killed
first attempt are well-behaved, so the abuse is judged as part of a case.

``nested``: a hello with the token, then a boundary message nested 3,000 levels deep.
``flood``: 2,000 extra connections, held open (an attempt may hold at most a few hundred).
``pipeline``: a hello with the token, then 200,000 boundary messages without reading answers.
``oneway``: a hello with the token, then 20,000 one-way boundary messages (no answer owed: a
loop around ``boundary()``, as fast as it can send).
After the abuse it reaches ``after:abuse`` and charges once with a stable key.
"""

from __future__ import annotations

import os
import socket
import sys

import killdrill
from killdrill.fakes import connect

mode = sys.argv[1]
killdrill.boundary("before:abuse")
held: list[socket.socket] = []
address = os.environ.get("KILLDRILL_CONTROL", "")
if address and os.environ.get("KILLDRILL_ATTEMPT", "1") != "1":
    target = "\0" + address[1:] if address.startswith("@") else address
    hello = b'{"token": "' + os.environ["KILLDRILL_CONTROL_TOKEN"].encode() + b'"}\n'
    if mode == "flood":
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # out-last the harness's descriptors
        for _ in range(2000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

            try:
                s.connect(target)
            except OSError:
                s.close()
                break
            held.append(s)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(target)
        s.settimeout(5)
        if mode == "nested":
            payload = b'{"point": ' + b"[" * 3000 + b"]" * 3000 + b"}\n"
        elif mode == "oneway":
            payload = b'{"point": "after:loop", "wait": false, "at": 1.0}\n' * 20_000
        else:
            payload = b'{"point": "before:pipelined"}\n' * 200_000
        try:
            s.sendall(hello + payload)
        except OSError as exc:  # the supervisor hung up on us: expected
            print(f"abuser: {exc}", file=sys.stderr)
        held.append(s)
print(f"abuser: holds {len(held)} connection(s)", file=sys.stderr)
killdrill.boundary("after:abuse")
connect().payments.charge(idempotency_key=f"{os.environ.get('KILLDRILL_THREAD', 't')}:charge", amount=5)
print("done")
