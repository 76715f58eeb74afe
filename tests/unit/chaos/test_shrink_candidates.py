"""Where the shrinker may move a timed fault: the named boundaries around where it landed, in the
fault's own kind (a power loss stays a power loss: the plain kill at the same point is another
fault, which the agent may well survive)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from killdrill.chaos.shrink import _candidates
from killdrill.records import KILLED, Attempt, TraceEvent

LABELS = ["before:pay_alice", "during:payments.charge", "after:pay_alice", "before:pay_bob"]


def _landed_after(point: str, kill: str) -> Attempt:
    trace = (TraceEvent("before:pay_alice", 1, 1.0, 1), TraceEvent(point, 1, 2.0, 1))
    return Attempt(1, kill, KILLED, -9, 3.0, trace=trace, killed_at="offset:3ms")


def _cands(schedule: str, attempt: Attempt) -> list[list[str]]:
    discovery: Any = SimpleNamespace(labels=lambda: list(LABELS))
    case: Any = SimpleNamespace(schedule=schedule, attempts=[attempt])
    return _candidates(discovery, case)


def test_a_timed_kill_may_move_to_the_named_boundaries_where_it_landed() -> None:
    (c,) = _cands("during:payments.charge+73%", _landed_after("during:payments.charge", "x"))
    assert c == ["during:payments.charge", "after:pay_alice", "during:payments.charge+73%"]


def test_a_timed_power_loss_moves_as_a_power_loss() -> None:
    (c,) = _cands("powerloss:during:payments.charge+73%", _landed_after("during:payments.charge", "x"))
    assert c == [
        "powerloss:during:payments.charge",
        "powerloss:after:pay_alice",
        "powerloss:during:payments.charge+73%",
    ]
