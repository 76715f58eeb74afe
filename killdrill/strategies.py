"""Random kill schedules over a discovered run, as Hypothesis strategies and a seeded sampler.

Fixed kill points prove the boundaries someone thought of; random kills find the rest.
Two kinds of random kill cover a run:

- ``offset:Xms``, X uniform over the clean run's duration: wherever the process is;
- ``POINT+Xms``, X uniform inside the interval from POINT to the next boundary: every
  interval is picked equally often, so a 0.2 ms window between an effect and its
  checkpoint is hit as often as the 800 ms the interpreter spends importing.

The Hypothesis strategies are for users' own property tests::

    from hypothesis import given
    from killdrill.strategies import schedules

    @given(schedules(discovery, max_kills=3))
    def test_exactly_once(schedule):
        chaos_case(drill, schedule).assert_exactly_once()

They shrink towards fewer kills and towards named boundaries (``one_of`` tries its
first branch first, floats shrink to 0), so a failing random millisecond is reported
at the boundary that explains it.  :func:`random_schedule` draws from the same space
with a plain ``random.Random``: ``killdrill chaos`` needs "run *i* of seed *S*" to be one
fixed schedule whatever the other runs did (shards, parallel workers, a budget), which
Hypothesis's adaptive engine does not promise; the engine does the shrinking there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import strategies as st

from killdrill.points import Kill, Schedule, parse_kill
from killdrill.records import DRAINED, KILLED, Attempt, Discovery

__all__ = [
    "START",
    "Interval",
    "interval_kills",
    "interval_of",
    "intervals",
    "kills",
    "named_kills",
    "offset_kills",
    "random_kill",
    "random_schedule",
    "schedules",
]

START = "(start)"
"""Name of the interval from spawn to the first boundary (imports, startup)."""

OFFSET_SHARE = 1 / 3
"""Share of random kills that are ``offset:`` kills; the rest are ``POINT+Xms``."""


@dataclass(frozen=True)
class Interval:
    """From a boundary (``label``, reached ``start_ms`` after spawn) to the next one."""

    label: str
    start_ms: float
    length_ms: float


def intervals(discovery: Discovery) -> list[Interval]:
    """The clean run's boundary intervals in order; the last one ends when the process exits."""
    cat = discovery.catalogue
    end = max(discovery.duration_ms, cat[-1].t_ms if cat else 0.0)
    out = []
    for i, entry in enumerate(cat):
        nxt = cat[i + 1].t_ms if i + 1 < len(cat) else end
        out.append(Interval(entry.label, entry.t_ms, max(0.0, nxt - entry.t_ms)))
    return out


def _round_ms(ms: float) -> float:
    """Microsecond resolution: schedules stay short to read and exact to replay."""
    return round(ms, 3)


def _delayed(label: str, ms: float) -> Kill:
    return parse_kill(f"{label}+{_round_ms(ms):g}ms")


def _duration(discovery: Discovery) -> float:
    return max(discovery.duration_ms, discovery.catalogue[-1].t_ms if discovery.catalogue else 0.0, 1.0)


# ---- Hypothesis strategies ---------------------------------------------------------------
def named_kills(discovery: Discovery) -> st.SearchStrategy[Kill]:
    """A kill exactly at a catalogue point (deterministic); shrinks towards the first point."""
    return st.sampled_from(discovery.labels()).map(parse_kill)


def interval_kills(discovery: Discovery) -> st.SearchStrategy[Kill]:
    """``POINT+Xms`` with the interval picked uniformly and X uniform inside it."""
    ivs = intervals(discovery)
    return st.sampled_from(ivs).flatmap(
        lambda iv: st.floats(0.0, iv.length_ms, exclude_max=iv.length_ms > 0).map(
            lambda x: _delayed(iv.label, x)
        )
    )


def offset_kills(discovery: Discovery) -> st.SearchStrategy[Kill]:
    """``offset:Xms`` with X uniform over the clean run's duration."""
    total = _duration(discovery)
    return st.floats(0.0, total).map(lambda x: Kill(offset_ms=_round_ms(x)))


def kills(discovery: Discovery, *, named: bool = True) -> st.SearchStrategy[Kill]:
    """Any kill; named points come first so shrinking moves a kill onto a boundary."""
    parts = [interval_kills(discovery), offset_kills(discovery)]
    if named:
        parts.insert(0, named_kills(discovery))
    return st.one_of(parts)


def schedules(
    discovery: Discovery, *, min_kills: int = 1, max_kills: int = 3, named: bool = True
) -> st.SearchStrategy[Schedule]:
    """A schedule of ``min_kills..max_kills`` kills, one per attempt."""
    if not discovery.catalogue:
        raise ValueError("the discovery has no kill point: nothing to schedule")
    if not 0 <= min_kills <= max_kills:
        raise ValueError(f"need 0 <= min_kills <= max_kills, got {min_kills}..{max_kills}")
    return st.lists(kills(discovery, named=named), min_size=min_kills, max_size=max_kills).map(
        lambda ks: Schedule(tuple(ks))
    )


# ---- the seeded sampler killdrill chaos uses ---------------------------------------------
def random_kill(discovery: Discovery, rng: random.Random) -> Kill:
    """One random kill: an offset (a third of the time) or a delay inside a random interval."""
    # Three draws whatever the branch, each a fraction: the same seed picks the same
    # interval and the same relative position on any machine's timings.
    offset, which, where = rng.random() < OFFSET_SHARE, rng.random(), rng.random()
    if offset:
        return Kill(offset_ms=_round_ms(where * _duration(discovery)))
    ivs = intervals(discovery)
    iv = ivs[min(int(which * len(ivs)), len(ivs) - 1)]
    return _delayed(iv.label, where * iv.length_ms)


def random_schedule(
    discovery: Discovery, rng: random.Random, *, min_kills: int = 1, max_kills: int = 3
) -> Schedule:
    """``min_kills..max_kills`` random kills, drawn only from ``rng``."""
    n = rng.randint(min_kills, max_kills)
    return Schedule(tuple(random_kill(discovery, rng) for _ in range(n)))


def interval_of(attempt: Attempt) -> str | None:
    """Where a kill landed: the last boundary the attempt reached (``START`` before any);
    None when the attempt was not killed by the schedule."""
    if attempt.outcome not in (KILLED, DRAINED) or attempt.killed_at is None:
        return None
    return attempt.trace[-1].label if attempt.trace else START
