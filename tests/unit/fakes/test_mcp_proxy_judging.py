"""The proxy judges a replay by what the server did, never by the answer's bytes, and finds its
drill when the MCP client stripped its environment (killdrill.fakes.locate)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from killdrill.agent import _GO
from killdrill.fakes import connect
from killdrill.fakes.mcp.proxy import CountingProxy, parse_keys

PROXY = [sys.executable, "-m", "killdrill.fakes.mcp", "--proxy", "hotel", "--", sys.executable, "-c", "1"]


def _answer(booking: str, *, replayed: bool, served_at: str, text: bool = False) -> dict[str, Any]:
    body = {"booking_id": booking, "room": "12", "replayed": replayed, "served_at": served_at}
    if text:  # a server that answers JSON as text (no structured content)
        import json

        return {"result": {"content": [{"type": "text", "text": json.dumps(body, indent=2)}]}}
    return {"result": {"content": [{"type": "text", "text": str(body)}], "structuredContent": body}}


def _outcomes(tmp_path: Path, answers: list[dict[str, Any]], **options: Any) -> list[str]:
    fakes = connect(tmp_path / "l.sqlite", thread="t")
    proxy = CountingProxy("hotel", options.get("keys", {}), fakes, os.getpid(), options.get("results"))
    args = {"room": "12", "request_id": "r1"}
    for answer in answers:
        proxy.record("book_room", dict(args), answer)
    return [c.outcome for c in fakes.ledger.calls()]


@pytest.mark.parametrize("text", [False, True])
def test_a_replay_marked_replayed_with_a_new_time_is_a_replay(tmp_path: Path, text: bool) -> None:
    answers = [
        _answer("bk_1", replayed=False, served_at="2026-12-07T05:00:00Z", text=text),
        _answer("bk_1", replayed=True, served_at="2026-12-07T05:00:09Z", text=text),
    ]
    assert _outcomes(tmp_path, answers, keys={"book_room": "request_id"}) == ["created", "replayed"]


def test_a_second_booking_under_the_same_key_is_a_new_effect(tmp_path: Path) -> None:
    answers = [
        _answer("bk_1", replayed=False, served_at="2026-12-07T05:00:00Z"),
        _answer("bk_2", replayed=False, served_at="2026-12-07T05:00:09Z"),
    ]
    assert _outcomes(tmp_path, answers, keys={"book_room": "request_id"}) == ["created", "created"]


def test_the_result_field_names_what_was_done_key_or_not(tmp_path: Path) -> None:
    same = [
        {"result": {"structuredContent": {"booking": {"id": "bk_1"}, "note": "booked"}}},
        {"result": {"structuredContent": {"booking": {"id": "bk_1"}, "note": "already booked"}}},
        {"result": {"structuredContent": {"booking": {"id": "bk_2"}, "note": "booked"}}},
    ]
    results = parse_keys(["book_room=booking.id"], "--result")
    assert _outcomes(tmp_path / "a", same, results=results) == ["created", "replayed", "created"]
    keyed = {"keys": {"book_room": "request_id"}, "results": results}
    assert _outcomes(tmp_path / "b", same, **keyed) == ["created", "replayed", "created"]
    with pytest.raises(ValueError, match="expected TOOL=FIELD"):
        parse_keys(["book_room"], "--result")


def _run(cmd: list[str], env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)


def _stripped(tmp_path: Path) -> dict[str, str]:
    """What the mcp SDK's get_default_environment leaves (and a private temp dir)."""
    env = {k: os.environ[k] for k in ("HOME", "PATH", "USER", "LOGNAME") if k in os.environ}
    return {**env, "TMPDIR": str(tmp_path)}


def test_under_a_fork_template_without_drill_variables_the_proxy_refuses_in_one_line(tmp_path: Path) -> None:
    """An ancestor started by a killdrill fork template (a forked attempt: /proc shows the template's
    environment) and no drill variables anywhere: exit 2, one line, no ledger made."""
    env = _stripped(tmp_path)
    inner = f"import subprocess, sys; sys.exit(subprocess.run({PROXY!r}, env={env!r}).returncode)"
    out = _run([sys.executable, "-c", inner], {**_stripped(tmp_path), "KILLDRILL_TEMPLATE": "1"})
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and "runs under a drill but cannot find its ledger" in out.stderr
    assert "env=dict(os.environ)" in out.stderr
    assert list(tmp_path.iterdir()) == []  # no ledger of its own


def _swallow(listener: socket.socket) -> None:
    """A supervisor that lets every point go (the hello, then ``go`` for each waited point)."""

    def serve(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn, conn.makefile("rb") as lines:
            lines.readline()  # the hello
            for line in lines:
                if b'"wait": false' not in line:
                    conn.sendall(_GO)

    with contextlib.suppress(OSError):
        while True:
            threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()


def test_the_agents_drill_variables_are_found_in_its_environment(tmp_path: Path) -> None:
    """The agent (the proxy's parent) has the drill's variables, the proxy none: it records into
    the drill's ledger, thread and attempt; ``{KILLDRILL_LEDGER}`` in ``--ledger`` is filled."""
    ledger = tmp_path / "drill.sqlite"
    control = socket.socket(socket.AF_UNIX)
    control.bind(str(tmp_path / "ctl"))
    control.listen(8)
    threading.Thread(target=_swallow, args=(control,), daemon=True).start()
    drill = {"KILLDRILL_LEDGER": str(ledger), "KILLDRILL_THREAD": "th", "KILLDRILL_ATTEMPT": "3",
             "KILLDRILL_CONTROL": str(tmp_path / "ctl")}  # fmt: skip
    code = (
        "import os, sys; from killdrill.fakes import connect; f = connect(sys.argv[1] or None);"
        " f.tickets.create(title='x'); print(f.ledger.url, f.thread, f.attempt)"
    )
    for given in ("", "{KILLDRILL_LEDGER}", "{ledger}"):
        inner = (
            "import subprocess, sys; sys.exit(subprocess.run("
            f"{[sys.executable, '-c', code, given]!r}, env={_stripped(tmp_path)!r}).returncode)"
        )
        out = _run([sys.executable, "-c", inner], {**_stripped(tmp_path), **drill})
        assert out.returncode == 0, out
        assert out.stdout.split()[1:] == ["th", "3"] and str(ledger) in out.stdout, out
    control.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("killdrill-")) == []


def test_by_hand_a_placeholder_refuses_and_a_killed_proxys_ledger_is_swept(tmp_path: Path) -> None:
    env = _stripped(tmp_path)
    out = _run([*PROXY[:3], "--ledger", "{KILLDRILL_LEDGER}", *PROXY[3:]], env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out
    assert "names the drill's KILLDRILL_LEDGER" in out.stderr
    # not under a drill: a temporary ledger, removed at exit, swept by the next one when killed
    hung = [*PROXY[:-2], "-c", "import time; time.sleep(60)"]
    proc = subprocess.Popen(hung, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not [p for p in tmp_path.iterdir() if p.name.startswith("killdrill-fakes-")]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [p for p in tmp_path.iterdir() if p.name.startswith("killdrill-fakes-")]
    code = "from killdrill.fakes import connect; connect().tickets.create(title='x')"
    assert _run([sys.executable, "-c", code], env).returncode == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("killdrill-fakes-")] == []


ECHO = (
    "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line)\n"
    "    sys.stdout.buffer.flush()\n"
)


def test_a_huge_line_passes_the_proxy_in_chunks_never_held_whole(tmp_path: Path) -> None:
    """A 50 MB line through the proxy (to an echoing server and back): the proxy's peak memory
    stays far below the line's size, the bytes arrive
    unchanged, and the proxy says it passed a message it did not read."""
    import subprocess
    import sys

    size = 50 << 20
    proxy = subprocess.Popen(
        [sys.executable, "-m", "killdrill.fakes.mcp", "--proxy", "echo", "--", sys.executable, "-c", ECHO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
        | {"TMPDIR": str(tmp_path)},
    )
    assert proxy.stdin is not None and proxy.stdout is not None
    line = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"x": "' + b"a" * size + b'"}}\n'
    got = bytearray()

    def read() -> None:
        assert proxy.stdout is not None
        while len(got) < len(line):
            chunk = proxy.stdout.read1(1 << 20)
            if not chunk:
                return
            got.extend(chunk)

    import threading

    reader = threading.Thread(target=read)
    reader.start()
    proxy.stdin.write(line)
    proxy.stdin.flush()
    reader.join(120)
    status = Path(f"/proc/{proxy.pid}/status").read_text().splitlines()
    peak_kb = int(next(x for x in status if x.startswith("VmHWM")).split()[1])
    proxy.stdin.close()
    proxy.wait(30)
    err = proxy.stderr.read().decode() if proxy.stderr else ""
    assert bytes(got) == line
    assert peak_kb < 40_000, f"the proxy peaked at {peak_kb} kB for a {size >> 20} MB line"
    assert "a client message of more than 4194304 bytes passed through unread" in err, err
