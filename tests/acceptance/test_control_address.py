"""Where an attempt's control socket lives when its workdir's path is too long for a socket file.

A Unix socket path is at most ~108 bytes; pytest's basetemp with a test's name and a case's
workdir passes that for every attempt.  The socket must still live in the case's own folder
(nothing of a drill outside its root: a user's tests write only under their temporary folder),
and agents must reach it at the address they are given.  Real processes, a real drill.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.process.control import BoundaryMessage, ControlListener

PY = sys.executable
LONG = "a-workdir-path-longer-than-a-unix-socket-path-may-be-" + "x" * 60

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/fd is Linux")

# Prints where its control socket really is (the link resolved while the attempt runs), then stops
# at a point: a kill there, and the resume prints it again.
_AGENT = textwrap.dedent(
    """
    import os, killdrill
    address = os.environ["KILLDRILL_CONTROL"]
    print("socket-in", os.path.realpath(os.path.dirname(address)), len(address), flush=True)
    killdrill.boundary("before:stop")
    """
)


def test_a_drill_under_a_long_root_keeps_each_control_socket_in_its_case(tmp_path: Path) -> None:
    """Every attempt's socket is in its own workdir, not in a short folder of the system's: before,
    each attempt made ``/tmp/kd-XXXXXXXX`` (and a harness killed hard left them there)."""
    root = tmp_path / LONG
    agent = tmp_path / "agent.py"
    agent.write_text(_AGENT)
    drill = Drill(
        [PY, str(agent), "--thread", "{thread}"], DrillOptions(root=root, keep=True, discovery_runs=1)
    )
    try:
        result = drill.run_case("before:stop")
    finally:
        drill.close()
    assert result.ok, result.text()
    lines = [a.stdout_tail.strip() for a in result.attempts]
    assert len(lines) == 2 and all(line.startswith("socket-in ") for line in lines), lines
    workdir = os.path.realpath(result.workdir)
    for line in lines:
        _, where, length = line.split()
        assert where.startswith(workdir + os.sep), (where, workdir)
        assert int(length) <= 100


def test_an_agent_of_our_uid_is_heard_at_the_descriptor_address_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    """The listener names the socket through its descriptor of the long directory; a child
    connects to that address as given and is heard; closing removes the socket file and the
    descriptor."""
    directory = tmp_path / LONG / "ctl"
    selector = selectors.DefaultSelector()
    listener = ControlListener(str(directory), selector).open()
    fd = int(listener.address.split("/")[4])
    assert listener.address.startswith(f"/proc/{os.getpid()}/fd/") and len(listener.address) <= 100
    assert os.listdir(directory) == [os.path.basename(listener.address)]
    client = textwrap.dedent(
        """
        import json, socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        s.sendall(json.dumps({"token": sys.argv[2]}).encode() + b"\\n"
                  + json.dumps({"point": "before:charge"}).encode() + b"\\n")
        print(s.recv(100).decode().strip())
        """
    )
    agent = subprocess.Popen(
        [PY, "-c", client, listener.address, listener.token], stdout=subprocess.PIPE, text=True
    )
    listener.attach(agent.pid)
    heard: list[str] = []
    try:
        while agent.poll() is None and not heard:
            for key, _ in selector.select(0.05):
                owner, conn = key.data
                if conn is None:
                    while owner.accept() is not None:
                        pass
                    continue
                for msg in owner.read(conn):
                    if isinstance(msg, BoundaryMessage):
                        heard.append(msg.point)
                        owner.release(msg.conn)
        answer = agent.communicate(timeout=10)[0].strip()
    finally:
        agent.kill()
        listener.close()
        selector.close()
    assert heard == ["before:charge"] and answer == '{"go": true}'
    assert os.listdir(directory) == []
    try:  # closed: the number is free, or reused by another thread's open of something else
        held = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        held = None
    assert held != str(directory)
