"""Kill points and schedules: the grammar of DESIGN.md, parsed into values.

A *point* is a named boundary an agent reaches (``before:charge_customer``,
``during:payments.charge``).  A *kill* says what to do to one attempt (kill at the
N-th occurrence of a point, a few milliseconds after it, at an offset from spawn, or
hold the agent there for a while).  A *schedule* is one kill per attempt.

Parsing errors are :class:`ScheduleError` carrying the exact offending text, so the
CLI and the pytest plugin can report them as usage errors in one line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KINDS = ("before", "after", "committed", "during")
"""Point kinds.  ``committed:`` is emitted by integrations (LangGraph) once a node's
writes are durable; ``during:`` by a fake after it committed an effect and before
the caller hears the response."""

_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-/\[\]]*"
_DUR = r"(?P<{g}>\d+(?:\.\d+)?)(?P<{g}_unit>us|ms|s)"
_POINT_RE = re.compile(
    rf"^(?P<kind>{'|'.join(KINDS)}):(?P<name>{_NAME})(?:#(?P<occ>\d+))?"
    rf"(?:(?P<op>[+~]){_DUR.format(g='dur')})?$"
)
_OFFSET_RE = re.compile(rf"^offset:{_DUR.format(g='off')}$")
_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


class ScheduleError(ValueError):
    """A kill point or schedule that does not parse; ``text`` is the offending part."""

    def __init__(self, text: str, why: str) -> None:
        super().__init__(f"bad kill point {text!r}: {why}")
        self.text = text
        self.why = why


def _fmt_ms(ms: float) -> str:
    return f"{ms:g}ms"


@dataclass(frozen=True)
class Kill:
    """What to do to one attempt.

    ``point`` is ``KIND:NAME`` (no occurrence), or ``None`` for an ``offset:`` kill.
    ``delay_ms`` (``POINT+Xms``) releases the agent at the point and kills it X ms
    later; ``hold_ms`` (``POINT~Xs``) holds the agent at the point, then lets it go
    (no kill: a hung call, for per-node timeouts).
    """

    point: str | None = None
    occurrence: int = 1
    delay_ms: float | None = None
    hold_ms: float | None = None
    offset_ms: float | None = None

    @property
    def is_kill(self) -> bool:
        """False for a pure hold (``POINT~Xs``): the attempt is not meant to die."""
        return self.hold_ms is None

    @property
    def is_named(self) -> bool:
        """A kill exactly at a named point (no delay, no offset): deterministic."""
        return self.point is not None and self.delay_ms is None and self.hold_ms is None

    @property
    def kind(self) -> str | None:
        return self.point.split(":", 1)[0] if self.point else None

    def __str__(self) -> str:
        if self.point is None:
            return f"offset:{_fmt_ms(self.offset_ms or 0.0)}"
        text = self.point if self.occurrence == 1 else f"{self.point}#{self.occurrence}"
        if self.delay_ms is not None:
            text += f"+{_fmt_ms(self.delay_ms)}"
        if self.hold_ms is not None:
            text += f"~{_fmt_ms(self.hold_ms)}"
        return text

    def at(self, point: str, occurrence: int) -> bool:
        """Does reaching ``point`` for the ``occurrence``-th time trigger this kill?"""
        return self.point == point and self.occurrence == occurrence


def parse_kill(text: str) -> Kill:
    """Parse one kill: ``before:x``, ``during:payments.charge#2``, ``after:x+3.5ms``,
    ``before:x~5s``, ``offset:137ms``."""
    raw = text
    text = text.strip()
    if not text:
        raise ScheduleError(raw, "empty kill point")
    m = _OFFSET_RE.match(text)
    if m:
        return Kill(offset_ms=float(m["off"]) * _UNITS_MS[m["off_unit"]])
    m = _POINT_RE.match(text)
    if not m:
        kind = text.split(":", 1)[0]
        if ":" not in text:
            why = f"expected KIND:NAME with KIND one of {', '.join(KINDS)} (or offset:Xms)"
        elif kind not in (*KINDS, "offset"):
            why = f"unknown kind {kind!r}; expected one of {', '.join(KINDS)} or offset"
            close = difflib.get_close_matches(kind, (*KINDS, "offset"), n=1)
            if close:
                why += f" (did you mean {close[0]}:{text.split(':', 1)[1]}?)"
        elif kind == "offset":
            why = "expected offset:<number><us|ms|s>, e.g. offset:137ms"
        else:
            why = "expected KIND:NAME[#N][+Xms|~Xs], e.g. before:charge_customer#2+3.5ms"
        raise ScheduleError(raw, why)
    occ = int(m["occ"]) if m["occ"] else 1
    if occ < 1:
        raise ScheduleError(raw, "occurrences count from 1")
    delay = hold = None
    if m["op"]:
        ms = float(m["dur"]) * _UNITS_MS[m["dur_unit"]]
        if m["op"] == "+":
            delay = ms
        else:
            hold = ms
    return Kill(point=f"{m['kind']}:{m['name']}", occurrence=occ, delay_ms=delay, hold_ms=hold)


@dataclass(frozen=True)
class Schedule:
    """One kill per attempt; attempts past the last kill run free."""

    kills: tuple[Kill, ...] = ()

    def __str__(self) -> str:
        return ",".join(str(k) for k in self.kills) or "none"

    def __len__(self) -> int:
        return len(self.kills)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.kills)

    def for_attempt(self, attempt: int) -> Kill | None:
        """The kill for 1-based ``attempt``, or None when it runs free."""
        return self.kills[attempt - 1] if 0 < attempt <= len(self.kills) else None


def parse_schedule(text: str | Schedule | Kill | Sequence[str | Kill]) -> Schedule:
    """Parse ``before:a,during:mailbox.send`` (or ``none``) into a :class:`Schedule`."""
    if isinstance(text, Schedule):
        return text
    if isinstance(text, Kill):
        return Schedule((text,))
    if isinstance(text, str):
        stripped = text.strip()
        if stripped in ("", "none"):
            return Schedule(())
        parts: Iterable[str | Kill] = stripped.split(",")
    else:
        parts = text
    return Schedule(tuple(p if isinstance(p, Kill) else parse_kill(p) for p in parts))


def occurrence_label(point: str, occurrence: int) -> str:
    """``before:x`` for the first occurrence, ``before:x#3`` for later ones."""
    return point if occurrence == 1 else f"{point}#{occurrence}"
