"""Hostile peers on the control channel: another local user, a stranger of our uid, an abusive agent.

Real processes throughout: the other user is uid 65534 via ``setpriv`` (root only), in a private
network namespace (``unshare --net``) so that it sees this test's sockets and nobody else's.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from killdrill.process.control import BoundaryMessage, ControlListener
from tests.leftovers import describe, survivors

HOSTILE = Path(__file__).parents[1] / "agents" / "hostile"
PY = sys.executable


def _other_user_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run a peer as another user (setpriv --reuid=65534)"
    for tool in ("setpriv", "unshare"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        return "cannot create a private network namespace (unshare --net)"
    return None


@pytest.mark.parametrize("address", ["private", "abstract"])
def test_a_boundary_forged_by_another_user_is_ignored(address: str, tmp_path: Path) -> None:
    """Under a root path too long for a socket file, another user forges ``during:payments.charge``
    and floods the channel; the ``no_key`` double charge must still be caught, never a pass."""
    why = _other_user_unavailable()
    if why:
        pytest.skip(why)
    tmp_path.chmod(0o755)  # the forger must reach the directory to even try
    proc = subprocess.run(
        ["unshare", "--net", PY, str(HOSTILE / "forged_drill.py"), address, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert "duplicate_effect" in result["kinds"], result
    assert result["killed_at"] == "during:payments.charge" and result["outcomes"] == ["killed", "exited"]
    assert "during:payments.charge" in result["points"] and result["points"][0] == "before:read_usage"
    forger = result["forger"]
    assert forger, "the forger found no socket: the test proves nothing"
    if address == "private":
        assert all(line.startswith("refused ") and "Permission denied" in line for line in forger), forger
        assert not result["notes"]
    else:  # anyone may connect to an abstract name: the peer check drops them
        assert any(line.startswith("forged @") for line in forger), forger
        assert any("uid 65534" in note and "ignored" in note for note in result["notes"]), result["notes"]


def _pump(listener: ControlListener, selector: selectors.BaseSelector, seconds: float) -> list[object]:
    """Drive the listener like the supervisor does, for ``seconds``; return what it produced."""
    out: list[object] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in selector.select(0.05):
            owner, conn = key.data
            if conn is None:
                while owner.accept() is not None:
                    pass
            else:
                for msg in owner.read(conn):
                    out.append(msg)
                    if isinstance(msg, BoundaryMessage):
                        owner.release(msg.conn)
    return out


CLIENT = textwrap.dedent(
    """
    import json, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    hello = json.dumps({"token": sys.argv[2]}).encode() + b"\\n"
    try:
        s.sendall(hello + b'{"point": "during:payments.charge"}\\n')
        print(s.recv(100).decode().strip() or "closed")
    except OSError:
        print("closed")
    """
)


@pytest.mark.parametrize("where", ["in the tree", "outside the tree"])
def test_only_the_attempts_process_tree_is_heard(where: str, tmp_path: Path) -> None:
    """A process of our own uid that knows the token but is not in the attempt's tree is ignored."""
    if not sys.platform.startswith("linux"):
        pytest.skip("SO_PEERCRED and /proc are Linux")
    selector = selectors.DefaultSelector()
    listener = ControlListener(str(tmp_path / "ctl"), selector).open()
    client = [PY, "-c", CLIENT, listener.address, listener.token]
    if where == "in the tree":  # the attempt is a shell whose child speaks
        attempt = subprocess.Popen(
            ["sh", "-c", 'exec "$@"', "sh", *client], stdout=subprocess.PIPE, text=True
        )
        listener.attach(attempt.pid)
        speaker = attempt
    else:
        attempt = subprocess.Popen(["sleep", "30"])
        listener.attach(attempt.pid)
        speaker = subprocess.Popen(client, stdout=subprocess.PIPE, text=True)
    try:
        produced = _pump(listener, selector, 1.5)
        answer = speaker.communicate(timeout=10)[0].strip()
    finally:
        attempt.kill()
        attempt.wait()
        listener.close()
        selector.close()
    if where == "in the tree":
        assert [m.point for m in produced if isinstance(m, BoundaryMessage)] == ["during:payments.charge"]
        assert answer == '{"go": true}' and listener.ignored == 0
    else:
        assert produced == [] and answer == "closed"
        assert listener.ignored == 1 and "outside the attempt" in (listener.stranger_note() or "")


_STARTER = """
import os, resource, sys
if {nofile} is not None:
    resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)  # the harness's own rusage (and its reaped children's)
open({peak!r}, "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run_abuser(mode: str, root: Path, nofile: int | None = None) -> tuple[int, str, float, list[str]]:
    """``killdrill run`` on the abusive agent: (exit code, output, harness peak RSS in MB, leftovers)."""
    marker = uuid.uuid4().hex
    argv = [PY, "-m", "killdrill", "run", "--schedule", "before:abuse", "--root", str(root / "runs")]
    argv += ["--timeout", "30", "--", "python", str(HOSTILE / "abuser.py"), mode, marker]
    # A small process starts the harness and reports its peak RSS: a child of this process would
    # count this process's pages in its peak (fork and vfork alike: exec keeps the old peak), and
    # pytest's process is hundreds of MB by the end of a run.
    peak = root / "peak.txt"
    starter = _STARTER.format(nofile=nofile, peak=str(peak))
    with open(root / "out.txt", "w+") as out:
        proc = subprocess.Popen([PY, "-c", starter, *argv], stdout=out, stderr=subprocess.STDOUT)
        proc.wait()
        out.seek(0)
        text = out.read()
    # scanned every 20 ms for a second, not once: a pid-hopping leftover can slip past one scan
    seen = survivors(marker)
    left = describe(seen) or [f"{pid} (gone by now)" for pid in sorted(seen)]
    return proc.returncode, text, int(peak.read_text()) / 1024, left


@pytest.mark.parametrize("mode", ["nested", "pipeline"])
def test_an_abusive_agent_is_a_harness_error_not_a_crash(mode: str, tmp_path: Path) -> None:
    """3,000-deep JSON or 200,000 pipelined boundaries: one line in the report, memory bounded,
    nothing left running (before: a RecursionError traceback; 341 MB and a pass)."""
    code, out, rss_mb, left = _run_abuser(mode, tmp_path)
    assert code == 1, out
    expected = "malformed control message" if mode == "nested" else "sent before the answer"
    assert "harness_error" in out and expected in out, out
    assert "Traceback" not in out
    assert rss_mb < 200, f"the harness peaked at {rss_mb:.0f} MB"
    assert left == []


def test_a_connection_flood_is_capped_and_the_kill_still_lands(tmp_path: Path) -> None:
    """2,000 connections against a harness limited to 100 descriptors: the excess is closed and
    noted, the case is judged as usual and no process is left behind (stopped or not)."""
    code, out, _, left = _run_abuser("flood", tmp_path, nofile=100)
    assert code == 0, out
    assert "EXACTLY-ONCE" in out and "Traceback" not in out
    assert left == []
