"""The six properties, each a function that runs ordinary drills of a framework's probe and reads
what they observed: the attempts' traces (which points each attempt reached) and the ledger (which
effects landed, and under which attempt).  The README ("Resume contract") defines each property in
exactly these terms; a cell's evidence names what was observed."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from killdrill.canonical import canonical_json
from killdrill.conform.frameworks import Framework
from killdrill.drill import DiscoveryError, Drill, DrillOptions
from killdrill.errors import KilldrillError, one_line
from killdrill.records import CaseResult, LedgerSnapshot, ViolationKind

PROPERTIES: tuple[str, ...] = (
    "prefix_continuation",
    "effect_exactly_once",
    "fork_determinism",
    "checkpoint_validity",
    "consume_once",
    "recovery_determinism",
)
QUICK_PROPERTIES: tuple[str, ...] = ("prefix_continuation", "consume_once")

HOLDS, VIOLATED, NA, NOT_INSTALLED, NOT_PROBED, ERROR = (
    "holds",
    "violated",
    "n/a",
    "not installed",
    "not probed",
    "error",
)

EFFECT_KINDS = {
    ViolationKind.DUPLICATE_EFFECT,
    ViolationKind.KEY_CHANGED,
    ViolationKind.KEY_REUSED,
    ViolationKind.UNEXPECTED_EFFECT,
    ViolationKind.STATE_DIVERGED,
}
RESUME_KINDS = {ViolationKind.RESUME_FAILED, ViolationKind.HANG, ViolationKind.HARNESS_ERROR}


@dataclass
class Cell:
    """One property of one framework: the status, the one-line evidence, how to reproduce it."""

    property: str
    framework: str
    version: str | None
    status: str
    evidence: str
    reproduce: str = ""
    seconds: float = 0.0
    cases: list[str] = field(default_factory=list)  # the `killdrill run` lines of the cases it read

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "framework": self.framework,
            "version": self.version,
            "status": self.status,
            "evidence": self.evidence,
            "reproduce": self.reproduce,
            "seconds": round(self.seconds, 1),
            "cases": self.cases,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cell:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


class ProbeRun:
    """The drills of one framework's probe, sharing a root folder and a fork template."""

    def __init__(self, fw: Framework, root: Path, *, keep: bool = False) -> None:
        self.fw = fw
        self.root = root
        self.options = DrillOptions(
            integrations=(fw.name,),
            launcher="fork",
            preload=tuple(fw.options.get("preload", ())),  # the integration preloads its framework
            root=str(root / fw.name),
            timeout=float(fw.options.get("timeout", 60.0)),
            keep=keep,
            model_script=fw.model_script(),
        )
        self._drill: Drill | None = None
        self._full: list[CaseResult] | None = None
        self._drills: list[Drill] = []

    def drill(self, *extra: str, **overrides: Any) -> Drill:
        if not extra and not overrides:
            if self._drill is None:
                self._drill = Drill(self.fw.command(), self.options)
                self._drills.append(self._drill)
            return self._drill
        d = Drill(self.fw.command(*extra), replace(self.options, **overrides))
        self._drills.append(d)
        return d

    def close(self) -> None:
        for d in self._drills:
            d.close()

    def full(self) -> list[CaseResult]:
        """One case per point a clean run reaches (effect exactly-once and checkpoint validity)."""
        if self._full is None:
            self._full = list(self.drill().run_all().cases)
        return self._full

    def reproduce(self, prop: str) -> str:
        return f"killdrill conform --integration {self.fw.name} --property {prop}"


def effects(snap: LedgerSnapshot | None, volatile: dict[str, list[str]]) -> Counter[str]:
    """What a run's ledger shows was done: each call as provider.op, key, payload and whether it
    landed or was replayed by its key (thread and workdir already written as placeholders), without
    the fields the drill's two clean runs showed to be volatile (as the verdict's identity does)."""
    out: Counter[str] = Counter()
    for c in snap.calls if snap is not None else ():
        if c.provider in ("killdrill", "model"):  # the harness's marker; a model call is no effect
            continue
        skip = set(volatile.get(f"{c.provider}.{c.op}", ()))
        payload = {k: v for k, v in c.payload.items() if k not in skip}
        out[f"{c.provider}.{c.op} {c.outcome} key={c.key} {canonical_json(payload)}"] += 1
    return out


def _difference(a: Counter[str], b: Counter[str]) -> str:
    only_a, only_b = a - b, b - a
    parts = [f"only the first: {k} x{n}" for k, n in list(only_a.items())[:1]]
    parts += [f"only the second: {k} x{n}" for k, n in list(only_b.items())[:1]]
    return "; ".join(parts)


def _killed(case: CaseResult, point: str) -> str | None:
    """Why the case's first attempt is no kill at ``point`` (None: it is)."""
    first = case.attempts[0] if case.attempts else None
    if first is None or first.outcome != "killed":
        return f"the first attempt was not killed at {point} ({first.outcome if first else 'no attempt'})"
    return None


def _violations(case: CaseResult, kinds: set[ViolationKind]) -> list[str]:
    return [f"{v.kind}: {v.message}" for v in case.violations if v.kind in kinds]


def prefix_continuation(run: ProbeRun) -> Cell:
    fw = run.fw
    case = run.drill().run_case(fw.committed)
    cell = Cell(
        "prefix_continuation", fw.name, fw.version(), HOLDS, "", case.reproduce, cases=[case.reproduce]
    )
    why = _killed(case, fw.committed)
    if why:
        cell.status, cell.evidence = ERROR, why
        return cell
    later = case.attempts[1:]
    reruns = sum(1 for a in later for e in a.trace if e.point == fw.rerun)
    resent = [
        c
        for c in (case.ledger.calls if case.ledger else ())
        if (c.provider, c.op) == ("payments", "charge") and c.attempt > 1
    ]
    went_on = any(e.point == fw.next_point for a in later for e in a.trace)
    failed = _violations(case, RESUME_KINDS)
    problems = []
    if reruns:
        problems.append(f"{fw.rerun} reached {reruns}x again")
    if resent:
        how = ", ".join(sorted({c.outcome for c in resent}))
        problems.append(f"its payments.charge sent again {len(resent)}x ({how})")
    if failed:
        problems.append(failed[0])
    elif not went_on:
        problems.append(f"the resume never reached {fw.next_point}")
    if problems:
        cell.status = VIOLATED
        cell.evidence = (
            f"killed at {fw.committed} ({fw.committed_means}), the resume ran charge again: "
            + "; ".join(problems)
        )
    else:
        cell.evidence = (
            f"killed at {fw.committed}; the resume went on at {fw.next_point}, "
            f"no {fw.rerun}, charge not re-sent"
        )
    return cell


def _full_cell(run: ProbeRun, prop: str, judge: Callable[[CaseResult], list[str]], what: str) -> Cell:
    fw = run.fw
    cases = run.full()
    cell = Cell(prop, fw.name, fw.version(), HOLDS, "", run.reproduce(prop))
    bad = [(c, judge(c)) for c in cases]
    bad = [(c, v) for c, v in bad if v]
    if bad:
        case, found = bad[0]
        cell.status = VIOLATED
        cell.evidence = f"{len(bad)} of {len(cases)} kill points; at {case.schedule}: {found[0]}"
        cell.reproduce = case.reproduce
        cell.cases = [c.reproduce for c, _ in bad]
    else:
        cell.evidence = f"{len(cases)} kill points (every point a clean run reaches): {what}"
    return cell


def effect_exactly_once(run: ProbeRun) -> Cell:
    def judge(case: CaseResult) -> list[str]:
        found = _violations(case, EFFECT_KINDS)
        if not _violations(case, RESUME_KINDS):
            found += _violations(case, {ViolationKind.MISSING_EFFECT})
        return found

    return _full_cell(run, "effect_exactly_once", judge, "every keyed effect landed once")


def checkpoint_validity(run: ProbeRun) -> Cell:
    return _full_cell(
        run,
        "checkpoint_validity",
        lambda case: _violations(case, RESUME_KINDS),
        "every resume loaded its state and completed",
    )


def fork_determinism(run: ProbeRun) -> Cell:
    fw = run.fw
    killed = run.drill(keep=True, max_attempts=1).run_case(fw.committed)
    cell = Cell("fork_determinism", fw.name, fw.version(), HOLDS, "", run.reproduce("fork_determinism"))
    why = _killed(killed, fw.committed)
    if why:
        cell.status, cell.evidence = ERROR, why
        return cell
    origin = run.root / f"{fw.name}-fork-origin"
    shutil.rmtree(origin, ignore_errors=True)
    shutil.copytree(Path(killed.workdir) / "state", origin)
    shutil.rmtree(killed.workdir, ignore_errors=True)
    volatile = run.drill().discover().volatile
    seen: list[Counter[str]] = []
    for _ in range(2):
        fork = run.drill("--fork-of", str(origin), discovery_runs=1)
        try:
            seen.append(effects(fork.discover().baseline, volatile))
        except DiscoveryError as exc:
            cell.status = VIOLATED
            cell.evidence = f"a resume of the state copied after {fw.committed} failed: {one_line(exc)[0]}"
            return cell
    if seen[0] != seen[1]:
        cell.status = VIOLATED
        cell.evidence = f"two resumes of one copy of the state after {fw.committed}: " + _difference(*seen)
    else:
        n = sum(seen[0].values())
        cell.evidence = f"two resumes of one copy of the state after {fw.committed}: the same {n} call(s)"
    return cell


def consume_once(run: ProbeRun) -> Cell:
    fw = run.fw
    drill = run.drill("--interrupt", resumers=2, barrier=fw.deliver_barrier)
    case = drill.run_case("before:deliver")
    cell = Cell("consume_once", fw.name, fw.version(), HOLDS, "", case.reproduce, cases=[case.reproduce])
    why = _killed(case, "before:deliver")
    if why:
        cell.status, cell.evidence = ERROR, why
        return cell
    found = _violations(case, EFFECT_KINDS | RESUME_KINDS)
    if found:
        cell.status = VIOLATED
        cell.evidence = f"one approval delivered by 2 concurrent resumers: {found[0]}"
    else:
        cell.evidence = "one approval delivered by 2 concurrent resumers: consumed once (its email sent once)"
    return cell


def recovery_determinism(run: ProbeRun) -> Cell:
    fw = run.fw
    point = "after:charge" if fw.rerun == "before:charge" else fw.committed
    drill = run.drill()
    a, b = drill.run_case(point), drill.run_case(point)
    cell = Cell(
        "recovery_determinism",
        fw.name,
        fw.version(),
        HOLDS,
        "",
        a.reproduce,
        cases=[a.reproduce, b.reproduce],
    )
    volatile = drill.discover().volatile
    ea, eb = effects(a.ledger, volatile), effects(b.ledger, volatile)
    va, vb = sorted(a.kinds), sorted(b.kinds)
    if ea != eb or va != vb:
        cell.status = VIOLATED
        diff = (
            _difference(ea, eb) if ea != eb else f"verdicts {va or 'exactly-once'} vs {vb or 'exactly-once'}"
        )
        cell.evidence = f"the same kill at {point} drilled twice: {diff}"
    else:
        verdict = ", ".join(va) or "exactly-once"
        cell.evidence = (
            f"the same kill at {point} drilled twice: the same {sum(ea.values())} call(s), {verdict}"
        )
    return cell


RUNNERS: dict[str, Callable[[ProbeRun], Cell]] = {
    "prefix_continuation": prefix_continuation,
    "effect_exactly_once": effect_exactly_once,
    "fork_determinism": fork_determinism,
    "checkpoint_validity": checkpoint_validity,
    "consume_once": consume_once,
    "recovery_determinism": recovery_determinism,
}


def conform(
    frameworks: list[Framework],
    properties: tuple[str, ...],
    root: Path,
    *,
    on_cell: Callable[[Cell], None] | None = None,
    keep: bool = False,
) -> list[Cell]:
    """Every (framework, property) cell, in the table's order."""
    cells: list[Cell] = []

    def add(cell: Cell) -> None:
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)

    for fw in frameworks:
        version = fw.version()
        if not fw.integration_available():
            why = f"no {fw.name} integration in this killdrill (killdrill/integrations/{fw.name}.py)"
            why += f"; {fw.missing_note}" if fw.missing_note else ""
            for prop in properties:
                add(Cell(prop, fw.name, version, NOT_PROBED, why))
            continue
        if not fw.installed():
            why = fw.install_hint() + (f" ({fw.install_note})" if fw.install_note else "")
            for prop in properties:
                add(Cell(prop, fw.name, None, NOT_INSTALLED, why))
            continue
        run = ProbeRun(fw, root, keep=keep)
        try:
            for prop in properties:
                if prop in fw.na:
                    add(Cell(prop, fw.name, version, NA, fw.na[prop]))
                    continue
                if prop in fw.not_probed:
                    add(Cell(prop, fw.name, version, NOT_PROBED, fw.not_probed[prop]))
                    continue
                start = time.monotonic()
                try:
                    cell = RUNNERS[prop](run)
                except KilldrillError as exc:
                    cell = Cell(prop, fw.name, version, ERROR, one_line(exc)[0], run.reproduce(prop))
                cell.seconds = time.monotonic() - start
                add(cell)
        finally:
            run.close()
    return cells
