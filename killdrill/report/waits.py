"""Where a drill's time went: the runtime's wait that dominated its cases, said in one line.

Each case carries its phases (``CaseResult.phases``, measured by the harness) and the waits its
integration's runtime reported inside them (``CaseResult.waits``: how long the runtime held work
a killed attempt left, with the agent's setting behind it, labelled by the integration, which
alone knows its framework's names).  A wait may also say why killdrill cannot shorten it
(``kept``: the agent's own setting, the broker's contract) and which of the runtime's waits the
integration already removed under a drill (``removed``); the line repeats both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from killdrill.records import CaseResult

__all__ = ["WAIT_SHARE", "WaitTally", "dominant_wait", "waits_line"]

WAIT_SHARE = 0.25
"""A drill names the runtime's dominant wait when it took at least this share of its cases' time."""


class WaitTally:
    """The cases' time (their phases) and the runtime's waits in it, per label, added one case at
    a time (a chaos job streams its cases)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.by_label: dict[str, float] = {}
        self.said: dict[str, dict[str, Any]] = {}  # label -> its "kept" and "removed", as first said

    def add(self, case: CaseResult) -> None:
        self.total += sum(
            v for k, v in case.phases.items() if k != "discovery"
        )  # the drill's, not the case's
        for w in case.waits:
            self.by_label[w["label"]] = self.by_label.get(w["label"], 0.0) + float(w["seconds"])
            self.said.setdefault(w["label"], {k: w[k] for k in ("kept", "removed") if w.get(k)})

    def dominant(self) -> dict[str, Any] | None:
        if not self.by_label or self.total <= 0:
            return None
        label, seconds = max(self.by_label.items(), key=lambda kv: kv[1])
        if seconds / self.total < WAIT_SHARE:
            return None
        return {
            "label": label,
            "seconds": round(seconds, 3),
            "cases_s": round(self.total, 3),
            "share": seconds / self.total,
            **self.said.get(label, {}),
        }


def dominant_wait(cases: Iterable[CaseResult]) -> dict[str, Any] | None:
    """The runtime's wait (``CaseResult.waits``, labelled by its integration) that took the
    largest share of the cases' time (their phases, less the drill's discovery), when that share is at least
    :data:`WAIT_SHARE`; None otherwise (a fast agent, a runtime that held nothing)."""
    tally = WaitTally()
    for case in cases:
        tally.add(case)
    return tally.dominant()


def waits_line(cases: Iterable[CaseResult]) -> str | None:
    """``cases waited 62% of their time (...) on LABEL after a kill`` (the label names the
    runtime, its setting and the unit it held: the integration's words), or None
    (:func:`dominant_wait`)."""
    w = dominant_wait(cases)
    if w is None:
        return None
    line = (
        f"cases waited {w['share']:.0%} of their time ({w['seconds']:.1f} s of {w['cases_s']:.1f} s)"
        f" on {w['label']} after a kill"
    )
    if w.get("kept"):
        line += f": {w['kept']}"
    if w.get("removed"):
        line += f" (killdrill already removed {'; '.join(w['removed'])})"
    return line
