"""A RabbitMQ broker for one run, as a deployment runs its broker: ``python rabbit_serve.py
--port PORT --data DIR``.  The node (``kd<PORT>@localhost``) keeps its database in DIR, so a start
after a SIGKILL finds its durable queues and the persistent messages they held, as a restarted
broker does; it listens on 127.0.0.1 only, with no plugins and no configuration file of the
machine's (the machine's own broker runs beside it).  SIGTERM (the drill's end of the case) stops
the node and removes DIR; a SIGKILL of the tree (``restart=rabbit:...``) leaves DIR for the next
start.

Needs Debian's ``rabbitmq-server`` package (``/usr/lib/rabbitmq/bin/rabbitmq-server``)."""

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys

import psutil

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"

p = argparse.ArgumentParser()
p.add_argument("--port", required=True)
p.add_argument("--data", required=True)
args = p.parse_args()
os.makedirs(args.data, exist_ok=True)
server: "subprocess.Popen[bytes] | None" = None


def free_port() -> int:
    """The node's distribution port (Erlang's, between nodes and rabbitmqctl): any free one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(signum: int, frame: object) -> None:
    """The case's end: the node gone with its data (nothing of it is judged after the case).
    Not waited for: the main thread's ``server.wait()`` holds the lock a wait here needs."""
    try:
        if server is not None:
            node = psutil.Process(server.pid)
            for proc in [*node.children(recursive=True), node]:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
    finally:
        shutil.rmtree(args.data, ignore_errors=True)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
env = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": args.data,  # the node's Erlang cookie, made on its first start
    "RABBITMQ_NODENAME": f"kd{args.port}@localhost",
    "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
    "RABBITMQ_NODE_PORT": args.port,
    "RABBITMQ_DIST_PORT": str(free_port()),
    "ERL_EPMD_ADDRESS": "127.0.0.1",
    "RABBITMQ_MNESIA_BASE": os.path.join(args.data, "mnesia"),
    "RABBITMQ_LOG_BASE": os.path.join(args.data, "log"),
    "RABBITMQ_PID_FILE": os.path.join(args.data, "node.pid"),
    "RABBITMQ_CONFIG_FILE": os.path.join(args.data, "none"),  # not /etc/rabbitmq's (port 5672)
    "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(args.data, "no-plugins"),
}
server = subprocess.Popen([SERVER], env=env, cwd=args.data, stdout=sys.stderr)
sys.exit(server.wait())
