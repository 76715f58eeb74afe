"""The agent-side API outside a drill: a no-op that reads its environment lazily."""

import asyncio
import json
import os
import subprocess
import sys

import killdrill
from killdrill import agent


def test_unarmed_boundary_is_a_no_op(monkeypatch) -> None:
    monkeypatch.delenv("KILLDRILL_CONTROL", raising=False)
    agent._after_fork_in_child()  # forget the environment read so far
    killdrill.boundary("before:anything")
    assert killdrill.armed() is False


def test_environment_is_read_at_first_call_not_import() -> None:
    code = (
        "import os, killdrill\n"
        "os.environ['KILLDRILL_CONTROL'] = '/nonexistent/ctl.sock'\n"
        "try:\n"
        "    killdrill.boundary('before:x')\n"
        "except killdrill.ControlChannelError as e:\n"
        "    print('armed late:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "armed late: killdrill: cannot reach the supervisor at /nonexistent/ctl.sock" in out.stdout


def test_node_decorates_sync_and_async_functions(monkeypatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(agent, "boundary", seen.append)

    @killdrill.node("sync_step")
    def step(x: int) -> int:
        return x + 1

    @killdrill.node("async_step")
    async def astep(x: int) -> int:
        return x * 2

    assert step(1) == 2
    assert asyncio.run(astep(2)) == 4
    assert step.__name__ == "step"
    with killdrill.node("ctx"):
        pass
    try:
        with killdrill.node("fails"):
            raise ValueError
    except ValueError:
        pass
    assert seen == [
        "before:sync_step",
        "after:sync_step",
        "before:async_step",
        "after:async_step",
        "before:ctx",
        "after:ctx",
        "before:fails",
    ]


_GATE_AGENT = r"""
import json, os, socket, sys, threading, time
path, ledger = sys.argv[1], sys.argv[2]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen()
point_read = threading.Event()
answered = []

def serve(conn):
    reader = conn.makefile("rb")
    reader.readline()  # the hello
    for line in reader:
        point = json.loads(line)["point"]
        if point == "after:x":  # the supervisor takes its time deciding (a loaded machine)
            point_read.set()
            time.sleep(0.3)
            answered.append(time.monotonic())
        conn.sendall(b'{"go": true}\n')

def accept():
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()

threading.Thread(target=accept, daemon=True).start()
os.environ.update(KILLDRILL_CONTROL=path, KILLDRILL_CONTROL_TOKEN="t", KILLDRILL_LEDGER=ledger)
os.environ.update(KILLDRILL_THREAD="th", KILLDRILL_ATTEMPT="1")
import killdrill
from killdrill.fakes import connect
fakes = connect()
landed = []

def branch():
    point_read.wait()
    fakes.payments.charge(idempotency_key="k", amount=1)
    landed.append(time.monotonic())

t = threading.Thread(target=branch)
t.start()
killdrill.boundary("after:x")
t.join()
print(json.dumps({"answered": answered[0], "landed": landed[0]}))
"""


def test_an_effect_of_another_thread_waits_while_a_kill_point_is_decided(tmp_path, monkeypatch) -> None:
    """In an attempt killed at a point, a parallel thread's fake call lands only after the
    supervisor answered the point another thread waits at: the kill's latency (a loaded machine)
    never decides which effects landed.  Without the gate (a hold, say) the call lands at once."""
    for gate, waits in (("1", True), ("", False)):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
        env["KILLDRILL_KILL_GATE"] = gate
        sock, ledger = tmp_path / f"c{gate}.sock", tmp_path / f"l{gate}.sqlite"
        argv = [sys.executable, "-c", _GATE_AGENT, str(sock), str(ledger)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        times = json.loads(out.stdout)
        assert (times["landed"] >= times["answered"]) is waits, (gate, times)
