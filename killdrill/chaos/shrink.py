"""Shrinking a failing chaos case to the simplest schedule that still shows its violations.

Kills move to named boundaries first (the step users care about), then Hypothesis's engine
drops kills and simplifies the rest, each candidate verified by a real case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from killdrill.chaos.case import chaos_case
from killdrill.chaos.strategies import START, interval_of
from killdrill.drill import Drill
from killdrill.points import parse_schedule
from killdrill.records import CaseResult, Discovery

__all__ = ["Shrunk", "shrink"]


@dataclass(frozen=True)
class Shrunk:
    """A failure reduced to a minimal schedule that still shows the same violation kinds."""

    schedule: str
    kinds: tuple[str, ...]
    original: str
    index: int | None
    reproduce: str
    runs: int  # cases run while shrinking
    case: CaseResult | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "kinds": list(self.kinds),
            "original": self.original,
            "index": self.index,
            "reproduce": self.reproduce,
            "shrink_runs": self.runs,
            "case": self.case.to_dict() if self.case else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Shrunk:
        case = CaseResult.from_dict(d["case"]) if d.get("case") else None
        return cls(
            d["schedule"],
            tuple(d["kinds"]),
            d["original"],
            d.get("index"),
            d["reproduce"],
            d["shrink_runs"],
            case,
        )


def _candidates(discovery: Discovery, case: CaseResult) -> list[list[str]]:
    """Per kill: named boundaries it could move to (the step's provider call, where it landed,
    the next boundary), then the kill itself.  A kill of another kind moves as that kind
    (``powerloss:POINT+F%`` to ``powerloss:POINT``: a plain kill there is another fault).

    ``sampled_from``-like indices shrink towards 0, so the named points are tried first.
    """
    labels = discovery.labels()
    out: list[list[str]] = []
    for number, kill in enumerate(parse_schedule(case.schedule), 1):
        options: list[str] = []
        if not kill.is_named and not kill.pause and number <= len(case.attempts):  # a pause stays one
            where = interval_of(case.attempts[number - 1])
            if where == START:
                options.append(labels[0])
            elif where is not None:
                options.extend(_during_before(labels, where))
                options.append(where)
                if where in labels and labels.index(where) + 1 < len(labels):
                    options.append(labels[labels.index(where) + 1])
            if kill.is_kill and kill.action is not None and kill.target is None:
                options = [f"{kill.action}:{o}" for o in options]
        options.append(str(kill))
        out.append(list(dict.fromkeys(options)))
    return out


def _during_before(labels: Sequence[str], where: str) -> list[str]:
    """The provider call nearest before ``where`` in the same step: "the provider did it, the
    caller never heard" explains a lost response best, so it is the first place to try."""
    if where not in labels:
        return []
    for label in reversed(labels[: labels.index(where) + 1]):
        if label.startswith("during:"):
            return [label]
        if label.startswith("before:"):
            break
    return []


def shrink(
    drill: Drill, case: CaseResult, *, max_runs: int = 24, seed: int = 0, index: int | None = None
) -> Shrunk:
    """Shrink a failing case with Hypothesis's engine to the simplest schedule showing its kinds.

    The failing choice sequence is seeded into an in-memory example database, so the
    shrinker starts from it: dropping kills (``False`` is simpler) and moving each kill to
    a named boundary (index 0 is simpler) are tried, each verified by a real case.  Answers
    are memoised per schedule, so timing noise cannot make the engine see a flaky test.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, find, settings
    from hypothesis import strategies as st
    from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes
    from hypothesis.errors import NoSuchExample

    target = tuple(sorted(case.kinds))
    cands = _candidates(drill.discover(), case)
    memo: dict[str, tuple[str, ...]] = {case.schedule: target, "none": ()}
    cases: dict[str, CaseResult] = {case.schedule: case}
    ran = 0

    def text_of(choice: Sequence[tuple[bool, int]]) -> str:
        return ",".join(c[i] for (keep, i), c in zip(choice, cands, strict=True) if keep) or "none"

    def reproduces(choice: Sequence[tuple[bool, int]]) -> bool:
        return holds(text_of(choice))

    def holds(text: str) -> bool:
        nonlocal ran
        if text not in memo:
            if ran >= max_runs:
                return False
            ran += 1
            tried = chaos_case(drill, text, seed=seed)
            memo[text] = tuple(sorted(tried.kinds))
            cases[text] = tried
        return set(memo[text]) >= set(target)  # every kind of the find shows again

    # First, deterministically, move each kill to the first named boundary that keeps the
    # failure: that is the step users care most about, so it must not depend on the order in
    # which the engine explores (or on the run budget running out first).
    current = [(True, len(c) - 1) for c in cands]
    for i, c in enumerate(cands):
        for j in range(len(c) - 1):
            trial = [*current[:i], (True, j), *current[i + 1 :]]
            if reproduces(trial):
                current = trial
                break
    strategy = st.tuples(*(st.tuples(st.booleans(), st.integers(0, len(c) - 1)) for c in cands))
    db = InMemoryExampleDatabase()
    key = b"killdrill-shrink"
    start = tuple(x for pair in current for x in pair)
    db.save(key + b".secondary", choices_to_bytes(start))  # secondary: "not shrunk yet"
    try:
        best = find(
            strategy,
            reproduces,
            settings=settings(
                database=db,
                phases=[Phase.reuse, Phase.shrink],
                deadline=None,
                verbosity=Verbosity.quiet,
                suppress_health_check=list(HealthCheck),
            ),
            database_key=key,
        )
    except NoSuchExample:  # the engine could not replay the start: keep the greedy result
        best = tuple(current)
    text = text_of(best)
    # Dropping a kill moves the ones after it to an earlier attempt, where a timed kill lands
    # elsewhere: give each timed kill left the named boundaries of where it landed *now*.
    final = cases.get(text)
    if final is not None and text != "none":
        landed = _candidates(drill.discover(), final)
        kills = [c[-1] for c in landed]
        for i, options in enumerate(landed):
            for option in options[:-1]:
                moved = ",".join([*kills[:i], option, *kills[i + 1 :]])
                if holds(moved):
                    kills[i] = option
                    break
        text = ",".join(kills)
    return Shrunk(
        text,
        target,
        case.schedule,
        index,
        drill.reproduce_line(text),
        ran,
        cases.get(text),
    )
