"""A case's ports come from below the kernel's ephemeral range (where no other program's
``bind(0)`` lands while a slow service has not listened yet), are held machine-wide until the
case ends (two harnesses never hand out one port at once), and never twice to one case."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from killdrill.process import ports
from killdrill.process.ports import Ports

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract Unix sockets are Linux's")


@linux
def test_a_cases_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low, _ = ports._ephemeral()
    if low - ports.LOWEST < 1000:
        pytest.skip(f"no room below this machine's ephemeral range ({low})")
    case = Ports()
    try:
        picked = [case.pick() for _ in range(50)]
        assert len(set(picked)) == 50
        assert all(ports.LOWEST <= p < low for p in picked), picked
        for p in picked[:5]:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))  # free for its service
    finally:
        case.release()


OTHER_HARNESS = """
import sys
from killdrill.process.ports import Ports
case = Ports()
print(case.pick(), flush=True)
sys.stdin.read()  # until told: its case ends
case.release()
print("released", flush=True)
"""


@linux
def test_a_port_held_by_another_harness_is_not_handed_out_until_its_case_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    low, _ = ports._ephemeral()
    if low - ports.LOWEST < 1000:
        pytest.skip(f"no room below this machine's ephemeral range ({low})")
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert other.stdout is not None and other.stdin is not None
    try:
        theirs = int(other.stdout.readline())
        draws = iter([theirs, theirs, theirs])
        monkeypatch.setattr(ports._pick, "randrange", lambda a, b: next(draws, theirs + 1))
        mine = Ports()
        assert mine.pick() == theirs + 1  # held by the other harness: skipped
        mine.release()
        other.stdin.close()
        assert other.stdout.readline() == "released\n"
        draws = iter([theirs])
        assert mine.pick() == theirs  # its case ended: free again
        mine.release()
    finally:
        other.kill()
        other.wait()
        other.stdout.close()


def test_with_no_room_below_the_range_the_kernels_pick_still_never_repeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ports, "_ephemeral", lambda: (ports.LOWEST + 10, 60999))
    kernel = iter([40001, 40001, 40003])
    monkeypatch.setattr(ports, "free_port", lambda: next(kernel))
    case = Ports()
    assert [case.pick(), case.pick()] == [40001, 40003]
