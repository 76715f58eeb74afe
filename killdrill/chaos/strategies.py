"""Random kill schedules over a discovered run, as Hypothesis strategies and a seeded planner.

Fixed kill points prove the boundaries someone thought of; random kills find the rest.
A random kill aims at one boundary interval (``start``: spawn to the first boundary, or a
boundary label: from it to the next) at a position given as a percentage of that interval
(``after:charge_customer+37.5%``, ``start+12%``): timing-free coordinates, so the seed
alone fixes the text of every schedule whatever the machine measured, and a 0.2 ms window
between an effect and its checkpoint is aimed at as often as the 800 ms of imports.

The Hypothesis strategies are for users' own property tests::

    from hypothesis import given
    from killdrill.chaos.strategies import schedules

    @given(schedules(discovery, max_kills=3, named=False))  # named kills may not be reached on resume
    def test_exactly_once(schedule):
        chaos_case(drill, schedule).assert_exactly_once()

They shrink towards fewer kills and towards named boundaries (``one_of`` tries its first
branch first, numbers shrink to 0).  :func:`stratified_schedule` is the planner ``killdrill
chaos`` uses: run *i* of seed *S* is one fixed schedule whatever the other runs did (shards,
workers, a budget), and kills are dealt round-robin over the intervals (each round a fresh
random permutation), so every interval gets a kill before any gets a second.
"""

from __future__ import annotations

import functools
import random
import threading
from dataclasses import dataclass, field

from hypothesis import strategies as st

from killdrill.drill.intervals import START, Interval, intervals, strata
from killdrill.points import Fault, Schedule, parse_fault
from killdrill.records import DRAINED, KILLED, Attempt, Discovery

__all__ = [
    "START",
    "Interval",
    "interval_kills",
    "interval_of",
    "intervals",
    "kills",
    "named_kills",
    "schedules",
    "start_kills",
    "strata",
    "stratified_schedule",
]


def _pct(x: float) -> float:
    """A fraction in [0, 1) as a percentage with two decimals, strictly below 100."""
    return min(round(x * 100.0, 2), 99.99)


def aim(stratum: str, pct: float) -> Fault:
    """The kill ``pct`` percent into ``stratum`` (``START`` or a boundary label)."""
    if stratum == START:
        return Fault(pct=pct)
    point = parse_fault(stratum)
    return Fault(point=point.point, occurrence=point.occurrence, pct=pct, process=point.process)


# ---- Hypothesis strategies ---------------------------------------------------------------
def named_kills(discovery: Discovery) -> st.SearchStrategy[Fault]:
    """A kill exactly at a catalogue point (deterministic); shrinks towards the first point."""
    return st.sampled_from(discovery.labels()).map(parse_fault)


def _percentages() -> st.SearchStrategy[float]:
    return st.integers(0, 9999).map(lambda n: n / 100.0)


def interval_kills(discovery: Discovery) -> st.SearchStrategy[Fault]:
    """``POINT+F%``: a boundary interval picked uniformly, a position inside it."""
    return st.tuples(st.sampled_from(discovery.labels()), _percentages()).map(lambda t: aim(*t))


def start_kills() -> st.SearchStrategy[Fault]:
    """``start+F%``: between spawn and the first boundary (imports, startup)."""
    return _percentages().map(lambda p: Fault(pct=p))


def kills(discovery: Discovery, *, named: bool = True) -> st.SearchStrategy[Fault]:
    """Any kill; named points come first so shrinking moves a kill onto a boundary."""
    parts = [interval_kills(discovery), start_kills()]
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


# ---- seeded sampling -----------------------------------------------------------------------
@dataclass
class _Deal:
    """How many kills runs 0..n-1 of one seed have, and, per attempt slot, each run's rank
    among the runs that have a kill in that slot: run i's k-th kill is the rank-th card
    dealt in slot k."""

    seed: int
    min_kills: int
    max_kills: int
    counts: list[int] = field(default_factory=list)
    ranks: list[list[int]] = field(default_factory=list)  # ranks[k][i], -1 when run i has no k-th kill
    dealt: list[int] = field(default_factory=list)  # cards dealt so far per slot

    def extend_to(self, index: int) -> None:
        if not self.dealt:
            self.dealt = [0] * self.max_kills
            self.ranks = [[] for _ in range(self.max_kills)]
        while len(self.counts) <= index:
            i = len(self.counts)
            n = random.Random(f"killdrill-chaos:{self.seed}:{i}:kills").randint(
                self.min_kills, self.max_kills
            )
            self.counts.append(n)
            for k in range(self.max_kills):
                if k < n:
                    self.ranks[k].append(self.dealt[k])
                    self.dealt[k] += 1
                else:
                    self.ranks[k].append(-1)


_DEAL_LOCK = threading.Lock()


@functools.lru_cache(maxsize=16)
def _deal(seed: int, min_kills: int, max_kills: int) -> _Deal:
    return _Deal(seed, min_kills, max_kills)


@functools.lru_cache(maxsize=4096)
def _round(seed: int, slot: int, round_no: int, strata_key: tuple[str, ...]) -> tuple[str, ...]:
    order = list(strata_key)
    random.Random(f"killdrill-chaos:{seed}:slot{slot}:round{round_no}").shuffle(order)
    return tuple(order)


def stratified_schedule(
    discovery: Discovery, seed: int, index: int, *, min_kills: int = 1, max_kills: int = 3
) -> Schedule:
    """Run ``index`` of ``seed``: a function of these, the bounds and the catalogue's labels.

    Kills of each attempt slot (first kills, second kills, ...) are dealt round-robin over
    ``strata(discovery)``, a fresh permutation per round, so the first ``len(strata)`` runs
    aim their first kill at every interval once.  The position inside the interval is a
    percentage drawn from the seed: no measured length enters the text.
    """
    if not 1 <= min_kills <= max_kills:
        raise ValueError(f"need 1 <= min_kills <= max_kills, got {min_kills}..{max_kills}")
    key = tuple(strata(discovery))
    with _DEAL_LOCK:
        deal = _deal(seed, min_kills, max_kills)
        deal.extend_to(index)
    out = []
    for slot in range(deal.counts[index]):
        rank = deal.ranks[slot][index]
        round_no, pos = divmod(rank, len(key))
        stratum = _round(seed, slot, round_no, key)[pos]
        where = random.Random(f"killdrill-chaos:{seed}:slot{slot}:card{rank}").random()
        out.append(aim(stratum, _pct(where)))
    return Schedule(tuple(out))


def interval_of(attempt: Attempt) -> str | None:
    """Where a kill landed: the last boundary the attempt reached (``START`` before any);
    None when the attempt was not killed by the schedule."""
    if attempt.outcome not in (KILLED, DRAINED) or attempt.killed_at is None:
        return None
    return attempt.trace[-1].label if attempt.trace else START
