"""A PostgreSQL server for one run, as a deployment runs its database: ``python pg_serve.py
--port PORT --data DIR``, run as root.  The first start makes the cluster (``initdb`` as the
``postgres`` user: the server refuses to run as root); a start after a kill finds it and recovers from its
WAL, as a restarted server does.  SIGTERM (the drill's end of the case) shuts the server down and
removes DIR; a SIGKILL of the tree (``restart=pg:...``) leaves DIR for the next start.

DIR must be reachable by the ``postgres`` user (a folder of /tmp, not a root-only one)."""

import argparse
import os
import shutil
import signal
import subprocess
import sys

p = argparse.ArgumentParser()
p.add_argument("--port", required=True)
p.add_argument("--data", required=True)
args = p.parse_args()
data = os.path.join(args.data, "cluster")
server: "subprocess.Popen[bytes] | None" = None


def stop(signum: int, frame: object) -> None:
    """The case's end (at any moment, even mid-start): the server down, the cluster removed."""
    try:
        if server is not None:
            server.send_signal(signal.SIGINT)  # fast shutdown: its clients are gone with the case
            try:
                server.wait(timeout=2)  # within the drill's grace
            except subprocess.TimeoutExpired:
                server.kill()
    finally:
        shutil.rmtree(args.data, ignore_errors=True)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
if not os.path.exists(os.path.join(data, "PG_VERSION")):
    shutil.rmtree(args.data, ignore_errors=True)  # an initdb killed half-way: start over
    os.makedirs(data, mode=0o700)
    shutil.chown(args.data, "postgres")
    shutil.chown(data, "postgres")
    subprocess.run(["initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"], check=True,
                   stdout=subprocess.DEVNULL, user="postgres")  # fmt: skip
server = subprocess.Popen(
    [
        "postgres",
        "-D",
        data,
        "-p",
        args.port,
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
    ],
    user="postgres",
)
sys.exit(server.wait())
