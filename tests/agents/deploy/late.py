"""A service that starts late: it waits ``--after`` seconds, then listens on ``--port`` (saying
nothing) or, without one, writes ``--line`` to stderr, and writes the monotonic time it did so
to ``--when`` (taken just before; the harness's clock: one per machine), so a test reads how
long the harness took to notice.  It then serves connections until it is stopped."""

import argparse
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--after", type=float, default=0.3)
p.add_argument("--port", type=int, default=None)
p.add_argument("--line", default="late service up")
p.add_argument("--when", required=True)
args = p.parse_args()
time.sleep(args.after)
server = socket.socket()
if args.port is not None:
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", args.port))
ready = time.monotonic()  # just before: the harness may notice it before the next line runs
if args.port is not None:
    server.listen()
else:
    print(args.line, file=sys.stderr, flush=True)
with open(args.when, "w") as f:
    f.write(repr(ready))
if args.port is None:
    time.sleep(3600)
while True:
    server.accept()[0].close()
