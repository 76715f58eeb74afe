"""Kill points and schedules: the grammar of killdrill/ARCHITECTURE.md, parsed into values.

A *point* is a named boundary an agent reaches (``before:charge_customer``,
``during:payments.charge``).  A *kill* says what to do to one attempt (kill at the
N-th occurrence of a point, a few milliseconds after it, at an offset from spawn, or
hold the agent there for a while, or pause it: the zombie worker of killdrill.faults.pause).  A
*schedule* is one kill per attempt.

Parsing errors are :class:`ScheduleError` carrying the exact offending text, so the
CLI and the pytest plugin can report them as usage errors in one line.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from killdrill.errors import UsageError

KINDS = ("before", "after", "committed", "during")
"""Point kinds.  ``committed:`` is emitted by integrations once a step's
writes are durable; ``during:`` by a fake after it committed an effect and before
the caller hears the response."""

_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-/\[\]]*"
_DUR = r"(?P<{g}>\d+(?:\.\d+)?)(?P<{g}_unit>us|ms|s)"
_PCT = r"(?P<pct>\d{1,2}(?:\.\d{1,4})?)%"
"""A position inside an interval, in percent of its clean-run length: 0 <= F < 100, at most
four decimals, so the printed text parses back to the very same number."""
_POINT_RE = re.compile(
    rf"^(?P<kind>{'|'.join(KINDS)}):(?P<name>{_NAME})(?:#(?P<occ>\d+))?"
    rf"(?:(?P<op>[+~])(?:{_DUR.format(g='dur')}|{_PCT}))?$"
)
_LABEL = rf"(?:{'|'.join(KINDS)}):{_NAME}(?:#\d+)?"
_PAUSE_RE = re.compile(rf"^pause:(?P<point>{_LABEL})(?:@(?P<until>{_LABEL}))?$")
"""``pause:POINT[#N][@OTHER[#M]]``: SIGSTOP the attempt's tree at POINT and start the resumer;
continue the paused attempt when the resumer exits, or (``@OTHER``) when it reaches OTHER."""
NET_FAULTS = ("drop", "reset")
"""Connection faults toward the HTTP fakes (not kills: the attempt lives on and its client retries).
``drop:PROVIDER.OP`` lets the provider commit the N-th request of that op, holds the response
(``~Xs``, default none) and closes the connection unanswered; ``reset:PROVIDER.OP`` resets the
connection before the request is processed (nothing committed)."""
_FAULT_RE = re.compile(
    rf"^(?P<fault>{'|'.join(NET_FAULTS)}):(?P<name>{_NAME})(?:#(?P<occ>\d+))?(?:~{_DUR.format(g='dur')})?$"
)
_OFFSET_RE = re.compile(rf"^offset:{_DUR.format(g='off')}$")
_START_RE = re.compile(rf"^start\+{_PCT}$")
_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}
_PROCESS_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_\-]*(?:\[\d+\])?):(?P<rest>.+)$")
"""``NAME:POINT`` aims at one process of a deployment (``api:before:x``, ``worker[1]:offset:2s``)."""
_WORDS = frozenset((*KINDS, *NET_FAULTS, "offset", "pause", "start"))
_ACTION_RE = re.compile(r"^(?P<action>[a-z][a-z0-9_]*)(?:=(?P<target>[^:,=\s]+))?:(?P<trigger>.+)$")
"""``KIND[=TARGET]:TRIGGER``: a fault kind of :data:`GRAMMAR`, what it acts on, and when."""


@dataclass(frozen=True)
class FaultGrammar:
    """The grammar entry of a fault kind written ``KIND[=TARGET]:TRIGGER`` (a machine's fault,
    a dependency's): its word, what its target and trigger may be, and the module of
    ``killdrill/faults/`` that acts it out (``faults.kinds`` loads it by this name).

    ``target``: ``"none"`` (the kind acts on something fixed: the case's file system),
    ``"optional"`` or ``"required"`` (``KIND=TARGET:...``: a process, a service, a dependency).
    ``triggers``: ``"point"`` (``[PROCESS:]KIND:NAME[#N][+Xms|+F%]``, a point some process
    reaches) and/or ``"time"`` (``[PROCESS:]offset:Xms``, ``start+F%``).  ``kills``: the launch
    that triggers it is meant to die (``Fault.is_kill``); its nemesis says an attempt that did not
    die of it is ``point_not_reached`` (``Nemesis.missed``: a ``faults.kill.Kill`` does).
    """

    name: str
    module: str
    target: str = "none"
    triggers: tuple[str, ...] = ("point",)
    kills: bool = False
    summary: str = ""


POWER_LOSS = "powerloss"
"""``powerloss:POINT`` (a kill's point or time): the kill, then the machine's power lost: the
case's workdir, on a lossy file system for every attempt, drops what was not fsynced
(killdrill.faults.powerloss)."""

_ANY = ("point", "time")
BUILTIN_GRAMMAR: tuple[FaultGrammar, ...] = (
    FaultGrammar(
        POWER_LOSS,
        "killdrill.faults.powerloss",
        triggers=("point", "time"),
        kills=True,
        summary="the machine loses power: the attempt's tree killed, the workdir's unsynced data dropped",
    ),
    FaultGrammar("restart", "killdrill.faults.restart", "required", _ANY, summary="kill, restart a service"),
    FaultGrammar("cut", "killdrill.faults.cut", "required", _ANY, summary="close a proxy's connections"),
    FaultGrammar("rst", "killdrill.faults.cut", "required", _ANY, summary="reset a proxy's connections"),
    FaultGrammar("stall", "killdrill.faults.cut", "required", _ANY, summary="a proxy stops a while"),
)
GRAMMAR: dict[str, FaultGrammar] = {g.name: g for g in BUILTIN_GRAMMAR}
"""The fault kinds written ``KIND[=TARGET]:TRIGGER``, by word: one entry a kind (its file in
``killdrill/faults/`` is named by ``module``).  The kill family's own forms (``POINT``,
``pause:``, ``drop:``, ``reset:``, ``offset:``, ``start+F%``, ``NAME:POINT``) are parsed below."""


def declare(grammar: FaultGrammar) -> FaultGrammar:
    """Add a fault kind's grammar entry in-process (a plugin's, a test's); the same entry again
    is a no-op, another under a known word (or a word of the kill family) is refused."""
    known = GRAMMAR.get(grammar.name)
    if grammar.name in _WORDS or (known is not None and known != grammar):
        raise UsageError(f"fault kind {grammar.name!r} is already declared")
    GRAMMAR[grammar.name] = grammar
    return grammar


class ScheduleError(UsageError, ValueError):
    """A kill point or schedule that does not parse; ``text`` is the offending part."""

    def __init__(self, text: str, why: str) -> None:
        super().__init__(f"bad kill point {text!r}: {why}")
        self.text = text
        self.why = why


MAX_MS = 7 * 24 * 3600 * 1000.0
"""Longest offset, delay or hold (a week): beyond it a number is a typo, not a schedule."""


def _fmt_ms(ms: float) -> str:
    """Milliseconds as plain decimal digits (``2000000ms``, ``0.5ms``), never ``2e+06ms``: what
    prints must parse back to the same value.  The shortest repr of the float is kept exactly."""
    text = format(Decimal(repr(float(ms))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text}ms"


def _duration_ms(raw: str, number: str, unit: str) -> float:
    """A parsed duration in milliseconds; a non-finite or absurd one is a :class:`ScheduleError`."""
    ms = float(number) * _UNITS_MS[unit]
    if not math.isfinite(ms) or ms > MAX_MS:
        raise ScheduleError(raw, f"a duration is at most a week ({MAX_MS / 1000:.0f}s)")
    return ms


def _fmt_pct(pct: float) -> str:
    return f"{pct:.4f}".rstrip("0").rstrip(".") + "%"


@dataclass(frozen=True)
class Fault:
    """What the schedule does to one attempt: most often a kill, or a hold, a pause (the zombie)
    or a connection fault (``is_kill`` tells which).

    ``point`` is ``KIND:NAME`` (no occurrence), or ``None`` for an ``offset:`` kill.
    ``delay_ms`` (``POINT+Xms``) releases the agent at the point and kills it X ms
    later; ``hold_ms`` (``POINT~Xs``) holds the agent at the point, then lets it go
    (no kill: a hung call, for per-node timeouts).

    ``pct`` is the timing-free form: ``POINT+F%`` kills F percent of the way from POINT
    to the next boundary, ``start+F%`` F percent of the way from spawn to the first
    boundary (``point`` None), lengths as the clean run measured them.  The text keeps
    the percentage; resolving against a discovery fills ``delay_ms`` / ``offset_ms``.
    """

    point: str | None = None
    occurrence: int = 1
    delay_ms: float | None = None
    hold_ms: float | None = None
    offset_ms: float | None = None
    pct: float | None = None
    pause: bool = False
    until: str | None = None  # with pause: the resumer's point (label, ``#M`` kept) that wakes it
    fault: str | None = None  # "drop" / "reset": a connection fault at ``during:PROVIDER.OP``
    process: str | None = None  # ``NAME:POINT``: only that process of a deployment (a service, ``driver``)
    action: str | None = (
        None  # ``KIND[=TARGET]:TRIGGER``: a kind of :data:`GRAMMAR` (the rest is its trigger)
    )
    target: str | None = None  # ``KIND=TARGET:...``: what the kind acts on (a service, a dependency)

    @property
    def is_kill(self) -> bool:
        """False for a pure hold (``POINT~Xs``), a pause or a connection fault: the attempt is not
        meant to die."""
        if self.action is not None:
            return self.action in GRAMMAR and GRAMMAR[self.action].kills
        return self.hold_ms is None and not self.pause and self.fault is None

    @property
    def acts(self) -> str:
        """The fault kind that acts this fault out (``faults.kinds``): ``kill`` (at a point, a
        delay, an offset), ``hold``, ``pause``, ``drop``, ``reset``, or a kind of :data:`GRAMMAR`."""
        if self.action is not None:
            return self.action
        if self.pause:
            return "pause"
        if self.fault is not None:
            return self.fault
        return "hold" if self.hold_ms is not None else "kill"

    @property
    def is_named(self) -> bool:
        """A kill exactly at a named point (no delay, no offset): deterministic."""
        return (
            self.point is not None
            and self.delay_ms is None
            and self.hold_ms is None
            and self.pct is None
            and not self.pause
        )

    @property
    def kind(self) -> str | None:
        return self.point.split(":", 1)[0] if self.point else None

    def __str__(self) -> str:
        text = self._text()
        text = f"{self.process}:{text}" if self.process else text
        if self.action is not None:
            return f"{self.action}{'=' + self.target if self.target else ''}:{text}"
        return text

    def _text(self) -> str:
        if self.point is None:
            if self.pct is not None:
                return f"start+{_fmt_pct(self.pct)}"
            return f"offset:{_fmt_ms(self.offset_ms or 0.0)}"
        text = self.point if self.occurrence == 1 else f"{self.point}#{self.occurrence}"
        if self.pause:
            return f"pause:{text}" + (f"@{self.until}" if self.until else "")
        if self.fault is not None:
            text = f"{self.fault}:{text.split(':', 1)[1]}"
        if self.pct is not None:
            text += f"+{_fmt_pct(self.pct)}"
        elif self.delay_ms is not None:
            text += f"+{_fmt_ms(self.delay_ms)}"
        if self.hold_ms is not None:
            text += f"~{_fmt_ms(self.hold_ms)}"
        return text

    def at(self, point: str, occurrence: int) -> bool:
        """Does reaching ``point`` for the ``occurrence``-th time trigger this kill?  (Never for a
        connection fault: the HTTP fakes apply it, the supervisor does not kill.)"""
        return self.fault is None and self.point == point and self.occurrence == occurrence


def parse_fault(text: str) -> Fault:
    """Parse one kill: ``before:x``, ``during:payments.charge#2``, ``after:x+3.5ms``,
    ``before:x~5s``, ``offset:137ms``, ``after:x+37.5%``, ``start+12%``, ``pause:after:x@before:y``
    (the zombie, killdrill.faults.pause); or a connection fault toward the HTTP fakes:
    ``drop:payments.charge#2~1s``, ``reset:payments.charge``; or a kind of :data:`GRAMMAR`,
    ``KIND[=TARGET]:TRIGGER`` (``restart=redis:worker:before:charge``)."""
    m = _ACTION_RE.match(text.strip())
    if m and (m["action"] in GRAMMAR or (m["target"] is not None and m["action"] not in _WORDS)):
        return _parse_action(text, m["action"], m["target"], m["trigger"])
    m = _PROCESS_RE.match(text.strip())
    if m and m["name"] not in _WORDS and (":" in m["rest"] or m["rest"].startswith("start")):
        try:
            return replace(_parse_plain(m["rest"]), process=m["name"])
        except ScheduleError as exc:
            why = exc.args[0].split(": ", 1)[1]
            raise ScheduleError(text, f"after {m['name']}: {why}") from None
    return _parse_plain(text)


def _parse_plain(text: str) -> Fault:
    raw = text
    text = text.strip()
    if not text:
        raise ScheduleError(raw, "empty kill point")
    if text.startswith("pause:"):
        return _parse_pause(raw, text)
    m = _OFFSET_RE.match(text)
    if m:
        return Fault(offset_ms=_duration_ms(raw, m["off"], m["off_unit"]))
    m = _START_RE.match(text)
    if m:
        return Fault(pct=float(m["pct"]))
    m = _FAULT_RE.match(text)
    if m:
        if "." not in m["name"]:
            raise ScheduleError(raw, f"expected {m['fault']}:PROVIDER.OP, e.g. {m['fault']}:payments.charge")
        if m["fault"] == "reset" and m["dur"] is not None:
            raise ScheduleError(raw, "a reset happens before the request is processed: it takes no hold")
        hold = _duration_ms(raw, m["dur"], m["dur_unit"]) if m["dur"] is not None else None
        occurrence = int(m["occ"]) if m["occ"] else 1
        if occurrence < 1:
            raise ScheduleError(raw, "occurrences count from 1")
        return Fault(point=f"during:{m['name']}", occurrence=occurrence, hold_ms=hold, fault=m["fault"])
    m = _POINT_RE.match(text)
    if not m:
        kind = text.split(":", 1)[0]
        if text.startswith("start"):
            why = "expected start+F% with 0 <= F < 100 (at most 4 decimals), e.g. start+12.5%"
        elif ":" not in text:
            why = f"expected KIND:NAME with KIND one of {', '.join(KINDS)} (or offset:Xms, pause:POINT)"
        elif kind in NET_FAULTS:
            why = f"expected {kind}:PROVIDER.OP[#N]" + ("[~Xs]" if kind == "drop" else "")
        elif kind not in (*KINDS, *NET_FAULTS, "offset"):
            why = f"unknown kind {kind!r}; expected one of {', '.join(KINDS + NET_FAULTS)}, offset or pause"
            close = difflib.get_close_matches(kind, (*KINDS, *NET_FAULTS, "offset", "pause"), n=1)
            if close:
                why += f" (did you mean {close[0]}:{text.split(':', 1)[1]}?)"
        elif kind == "offset":
            why = "expected offset:<number><us|ms|s>, e.g. offset:137ms"
        else:
            why = "expected KIND:NAME[#N][+Xms|+F%|~Xs], e.g. before:charge_customer#2+3.5ms"
        raise ScheduleError(raw, why)
    occ = int(m["occ"]) if m["occ"] else 1
    if occ < 1:
        raise ScheduleError(raw, "occurrences count from 1")
    delay = hold = pct = None
    if m["pct"] is not None:
        if m["op"] == "~":
            raise ScheduleError(raw, "a hold needs a duration (POINT~Xs), not a percentage")
        pct = float(m["pct"])
    elif m["op"]:
        ms = _duration_ms(raw, m["dur"], m["dur_unit"])
        if m["op"] == "+":
            delay = ms
        else:
            hold = ms
    return Fault(point=f"{m['kind']}:{m['name']}", occurrence=occ, delay_ms=delay, hold_ms=hold, pct=pct)


def _parse_action(raw: str, action: str, target: str | None, trigger: str) -> Fault:
    """``KIND[=TARGET]:TRIGGER``: the trigger is a kill's point or time, checked against the
    kind's grammar entry."""
    grammar = GRAMMAR.get(action)
    if grammar is None:
        why = f"unknown fault kind {action!r}"
        close = difflib.get_close_matches(action, list(GRAMMAR), n=1)
        raise ScheduleError(raw, why + (f" (did you mean {close[0]}?)" if close else ""))
    form = f"{action}{'=TARGET' if grammar.target == 'required' else ''}:TRIGGER"
    if target is None and grammar.target == "required":
        raise ScheduleError(raw, f"expected {form}: {action} needs a target")
    if target is not None and grammar.target == "none":
        raise ScheduleError(raw, f"expected {action}:TRIGGER: {action} takes no target")
    try:
        when = parse_fault(trigger)
    except ScheduleError as exc:
        raise ScheduleError(raw, f"after {action}: {exc.why}") from None
    if when.action is not None or when.pause or when.fault is not None or when.hold_ms is not None:
        raise ScheduleError(raw, f"expected {form} with a point or a time as TRIGGER, not {trigger!r}")
    if when.point is not None and "point" not in grammar.triggers:
        raise ScheduleError(raw, f"{action} is triggered at a time (offset:Xms, start+F%), not at a point")
    if when.point is None and "time" not in grammar.triggers:
        raise ScheduleError(raw, f"{action} is triggered at a point (KIND:NAME[#N][+Xms]), not at a time")
    return replace(when, action=action, target=target)


def _parse_pause(raw: str, text: str) -> Fault:
    m = _PAUSE_RE.match(text)
    if not m:
        raise ScheduleError(
            raw,
            "expected pause:KIND:NAME[#N][@KIND:NAME[#M]] (no delay, hold or percentage),"
            " e.g. pause:after:effects.lease or pause:after:effects.lease@during:tickets.create",
        )
    point = parse_fault(m["point"])
    until = None
    if m["until"]:
        other = parse_fault(m["until"])
        assert other.point is not None
        until = occurrence_label(other.point, other.occurrence)
    return Fault(point=point.point, occurrence=point.occurrence, pause=True, until=until)


@dataclass(frozen=True)
class Schedule:
    """One fault per attempt (a kill, mostly); attempts past the last one run free."""

    faults: tuple[Fault, ...] = ()

    def __str__(self) -> str:
        return ",".join(str(k) for k in self.faults) or "none"

    def __len__(self) -> int:
        return len(self.faults)

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.faults)

    def for_attempt(self, attempt: int) -> Fault | None:
        """The fault for 1-based ``attempt``, or None when it runs free."""
        return self.faults[attempt - 1] if 0 < attempt <= len(self.faults) else None


def parse_schedule(text: str | Schedule | Fault | Sequence[str | Fault]) -> Schedule:
    """Parse ``before:a,during:mailbox.send`` (or ``none``) into a :class:`Schedule`."""
    if isinstance(text, Schedule):
        return text
    if isinstance(text, Fault):
        return Schedule((text,))
    if isinstance(text, str):
        stripped = text.strip()
        if stripped in ("", "none"):
            return Schedule(())
        parts: Iterable[str | Fault] = stripped.split(",")
    else:
        parts = text
    return Schedule(tuple(p if isinstance(p, Fault) else parse_fault(p) for p in parts))


def occurrence_label(point: str, occurrence: int) -> str:
    """``before:x`` for the first occurrence, ``before:x#3`` for later ones."""
    return point if occurrence == 1 else f"{point}#{occurrence}"
