"""What a chaos job reports: per-run records, the kill spread, report.json / junit.xml /
report.html (each written atomically: a killed job never leaves half a file), the end text,
and the merge of one seed's shards.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from killdrill.chaos.shrink import Shrunk
from killdrill.chaos.strategies import START, interval_of
from killdrill.points import occurrence_label, parse_fault, parse_schedule
from killdrill.records import (
    HARNESS_ERROR,
    Attempt,
    AttemptOutcome,
    CaseResult,
    Discovery,
    StableName,
    Verdict,
)
from killdrill.report.outputs import atomic_write_text

__all__ = [
    "CLEAN",
    "ERRORED",
    "MISSED",
    "VIOLATED",
    "RunRecord",
    "atomic_write_text",
    "chaos_counts",
    "is_chaos_report",
    "render_text",
    "report_dict",
    "spread",
    "write_junit",
    "write_reports",
]


class RunOutcome(StableName):
    """How one chaos run ended."""

    CLEAN = "clean"  # a fault (kill, pause, connection fault) landed and the case was exactly-once
    VIOLATED = "violated"  # the case was not exactly-once
    MISSED = "missed"  # no fault landed (the run ended before its first one): proves nothing
    ERRORED = "harness_error"  # the harness could not run it


CLEAN, VIOLATED, MISSED = RunOutcome.CLEAN, RunOutcome.VIOLATED, RunOutcome.MISSED
ERRORED = RunOutcome.ERRORED
"""Run outcomes: exactly-once with a fault landed; a violation; no fault landed; harness error."""


def _landed(case: CaseResult) -> list[str]:
    """Where each fault of the run landed: kills (their interval), and pauses and connection
    faults (their point): a pause that held the worker is a fault that landed, not a miss."""
    return [iv for a in case.attempts if (iv := interval_of(a) or _fault_point(a)) is not None]


def _fault_point(attempt: Attempt) -> str | None:
    """The point of a non-kill fault (``pause:``, ``drop:``, ``reset:``) that landed, else None.

    Such an attempt lives on (it exits by itself): it landed unless its point was not reached."""
    if attempt.kill is None or attempt.outcome in (
        AttemptOutcome.POINT_NOT_REACHED,
        AttemptOutcome.HARNESS_ERROR,
    ):
        return None
    try:
        kill = parse_fault(attempt.kill)
    except ValueError:
        return None
    if kill.is_kill or not (kill.pause or kill.fault) or kill.point is None:
        return None
    return occurrence_label(kill.point, kill.occurrence)


@dataclass(frozen=True)
class RunRecord:
    """One random run: its index in the seed's sequence, its schedule and what happened."""

    index: int
    schedule: str
    outcome: str
    kinds: tuple[str, ...]
    landed: tuple[str, ...]  # interval (boundary label or START) of each kill, point of each pause/net fault
    missed: int  # kills scheduled for attempts that ran but did not land
    seconds: float
    reproduce: str = ""  # the exact command that runs this schedule again

    @classmethod
    def of(cls, index: int, case: CaseResult, seconds: float) -> RunRecord:
        landed = tuple(_landed(case))
        ran = min(len(parse_schedule(case.schedule)), len(case.attempts))
        missed = sum(1 for n in case.notes if n.startswith("kill missed:"))
        if HARNESS_ERROR in case.kinds:
            outcome = ERRORED
        elif not case.ok:
            outcome = VIOLATED
        elif not landed:
            outcome = MISSED
        else:
            outcome = CLEAN
        return cls(
            index,
            case.schedule,
            outcome,
            tuple(sorted(case.kinds)),
            landed,
            min(missed, ran),
            round(seconds, 3),
            case.reproduce,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "schedule": self.schedule,
            "outcome": self.outcome,
            "kinds": list(self.kinds),
            "landed": list(self.landed),
            "missed": self.missed,
            "seconds": self.seconds,
            "reproduce": self.reproduce,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        return cls(
            d["index"],
            d["schedule"],
            d["outcome"],
            tuple(d["kinds"]),
            tuple(d["landed"]),
            d["missed"],
            d["seconds"],
            d.get("reproduce", ""),
        )


def report_dict(
    header: dict[str, Any],
    discovery: Discovery,
    runs: Sequence[RunRecord],
    cases: Sequence[CaseResult],
    failures: Sequence[Shrunk],
) -> dict[str, Any]:
    from killdrill.report.drill import summarize_cases

    summary = summarize_cases(cases)
    summary.update(chaos_counts(runs))
    return {
        "chaos": header,
        "discovery": discovery.to_dict(),
        "runs": [r.to_dict() for r in runs],
        "cases": [c.to_dict() for c in cases],
        "spread": spread(discovery, runs),
        "failures": [f.to_dict() for f in failures],
        "summary": summary,
    }


def chaos_counts(runs: Iterable[RunRecord]) -> dict[str, int]:
    """One pass over the runs (a job's are read from disk, not held: killdrill.chaos.stream)."""
    counts: dict[str, int] = {CLEAN: 0, VIOLATED: 0, MISSED: 0, ERRORED: 0}
    n = landed = missed = 0
    for r in runs:
        n += 1
        counts[r.outcome] += 1
        landed += len(r.landed)
        missed += r.missed
    return {
        "runs": n,
        "runs_clean": counts[CLEAN],
        "runs_violated": counts[VIOLATED],
        "runs_without_kill": counts[MISSED],
        "runs_harness_error": counts[ERRORED],
        "kills_landed": landed,
        "kills_missed": missed,
    }


def spread(discovery: Discovery, runs: Iterable[RunRecord]) -> dict[str, dict[str, int]]:
    """Interval (from this boundary to the next) -> kills aimed at it (percentage kills), kills
    that landed there, and of those in violated runs."""
    out = {START: {"aimed": 0, "kills": 0, "violated": 0}}
    out.update({label: {"aimed": 0, "kills": 0, "violated": 0} for label in discovery.labels()})
    for r in runs:
        for kill in parse_schedule(r.schedule):
            if kill.pct is not None:
                label = START if kill.point is None else occurrence_label(kill.point, kill.occurrence)
                out.setdefault(label, {"aimed": 0, "kills": 0, "violated": 0})["aimed"] += 1
        for iv in r.landed:
            row = out.setdefault(iv, {"aimed": 0, "kills": 0, "violated": 0})
            row["kills"] += 1
            row["violated"] += r.outcome == VIOLATED
    return out


def write_reports(folder: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """``report.json``, ``junit.xml`` (one testcase per run) and a self-contained ``report.html``."""
    from killdrill.report.drill import write_json
    from killdrill.report.html import render_html

    out = Path(folder)
    write_json(out / "report.json", dict(data))
    write_junit(out / "junit.xml", data)
    atomic_write_text(out / "report.html", render_html(data))


def write_junit(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """One testcase per run, a failure element with the verdict text for each violated run."""
    runs = [RunRecord.from_dict(r) for r in data["runs"]]
    cases = [CaseResult.from_dict(c) for c in data["cases"]]
    write_junit_stream(path, data["chaos"], runs, zip(runs, cases, strict=True))


def write_junit_stream(
    path: str | os.PathLike[str],
    header: Mapping[str, Any],
    runs: Iterable[RunRecord],
    pairs: Iterable[tuple[RunRecord, CaseResult]],
) -> None:
    """:func:`write_junit` one testcase at a time: ``runs`` is read once for the suite's counts,
    then ``pairs`` (the same runs with their cases, by index) once for the testcases."""
    from killdrill.report.drill import render_case
    from killdrill.report.outputs import atomic_writer

    n = failures = errors = 0
    seconds = 0.0
    for r in runs:
        n += 1
        failures += r.outcome == VIOLATED
        errors += r.outcome == ERRORED
        seconds += r.seconds
    suite = ET.Element(
        "testsuite",
        name=f"killdrill chaos seed {header['seed']} shard {header['shard']}",
        tests=str(n),
        failures=str(failures),
        errors=str(errors),
        time=f"{seconds:.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="seed", value=str(header["seed"]))
    head = ET.tostring(suite, encoding="unicode")
    head = head[: head.rindex("</testsuite>")]
    with atomic_writer(path) as fh:
        fh.write("<?xml version='1.0' encoding='utf-8'?>\n<testsuites>\n  ")
        fh.write(head.replace("<properties>", "\n    <properties>", 1))
        for rec, case in pairs:
            tc = ET.Element(
                "testcase",
                classname="killdrill.chaos.job",
                name=f"run {rec.index} [{rec.schedule}]",
                time=f"{rec.seconds:.3f}",
            )
            if rec.outcome in (VIOLATED, ERRORED):
                tag = "failure" if rec.outcome == VIOLATED else "error"
                kind = rec.kinds[0] if rec.kinds else tag
                el = ET.SubElement(tc, tag, message=", ".join(rec.kinds), type=kind)
                el.text = render_case(case)
            out = [f"reproduce: {rec.reproduce or case.reproduce}"]
            if rec.outcome == MISSED:
                out.append("no fault landed: " + "; ".join(case.notes))
            ET.SubElement(tc, "system-out").text = "\n".join(out)
            ET.indent(tc, space="  ", level=2)
            fh.write("\n    " + ET.tostring(tc, encoding="unicode"))
        fh.write("\n  </testsuite>\n</testsuites>\n")


_OUTCOME_TEXT = {CLEAN: str(Verdict.EXACTLY_ONCE), MISSED: "no fault landed"}


def render_text(data: Mapping[str, Any]) -> str:
    """The end-of-job text: counts, the kill spread over intervals, the shrunk failures."""
    h, s = data["chaos"], data["summary"]
    lines = ["Runs (each with the command that reproduces it):"]
    for r in data["runs"]:
        verdict = (
            ", ".join(r["kinds"]) if r["outcome"] in (VIOLATED, ERRORED) else _OUTCOME_TEXT[r["outcome"]]
        )
        lines.append(f"  run {r['index']} [{r['schedule']}] {verdict}")
        lines.append(f"    {r.get('reproduce') or '(reproduction not recorded)'}")
    lines += [
        "",
        f"killdrill chaos: seed {h['seed']}, shard {h['shard']}: {s['runs']} runs "
        f"({s['runs_clean']} exactly-once, {s['runs_violated']} violated, "
        f"{s['runs_without_kill']} without a fault landed, {s['runs_harness_error']} harness error), "
        f"{s['kills_landed']} faults landed (kills, pauses, connection faults), "
        f"{s['kills_missed']} kills missed (the attempt exited 0 before its random kill time: not a failure)"
        + (f"; stopped by {h['stopped']}" if h.get("stopped") not in (None, "runs") else ""),
        "",
        "Fault spread (per interval, from this boundary to the next):",
    ]
    head = ("interval", "aimed", "landed", "in violated runs")
    rows = [
        (label, str(v.get("aimed", 0)), str(v["kills"]), str(v["violated"]) if v["violated"] else "")
        for label, v in data["spread"].items()
    ]
    width = max(len(r[0]) for r in [head, *rows])
    lines.extend(
        f"  {label.ljust(width)}  {aimed:>5}  {kills:>6}  {bad}".rstrip()
        for label, aimed, kills, bad in [head, *rows]
    )
    lines.append(
        "  aimed: random kills drawn into the interval (POINT+F%, start+F%); landed: every fault that"
        " landed there, kills at a named boundary and pauses included, so landed can exceed aimed"
    )
    failures = data.get("failures") or []
    if failures:
        lines.append("")
        lines.append(f"{len(failures)} distinct failure(s), shrunk:")
        for f in failures:
            first = f" (run {f['index']})" if f.get("index") is not None else ""
            lines.append(f"  [{f['schedule']}] {', '.join(f['kinds'])}  from [{f['original']}]{first}")
            lines.extend(f"    {m}" for m in shrunk_messages(f))
            lines.append(f"    {f['reproduce']}")
    elif s["runs_violated"]:
        lines.append("")
        lines.append("Violated runs (not shrunk):")
        for r in data["runs"]:
            if r["outcome"] == VIOLATED:
                lines.append(f"  run {r['index']} [{r['schedule']}] {', '.join(r['kinds'])}")
    lines.append("")
    lines.append(f"seed: {h['seed']}")
    return "\n".join(lines)


def shrunk_messages(failure: Mapping[str, Any]) -> list[str]:
    """``kind: message`` of each violation of a shrunk failure's case (its kinds alone say too
    little: which effect, how often, under which keys)."""
    case = failure.get("case") or {}
    return [f"{v['kind']}: {v['message']}" for v in case.get("violations", ())]


_CHAOS_HEAD = re.compile(rb'\s*\{\s*"chaos"\s*:\s*\{')


def is_chaos_report(path: str | os.PathLike[str]) -> bool:
    """Is ``path`` a chaos job's ``report.json``?  The job writes its ``"chaos"`` header first,
    so the first bytes say it without parsing the file (~9 MB for 10,000 runs, which the merge
    then parses once more); any other JSON is parsed whole."""
    try:
        with open(path, "rb") as fh:
            if _CHAOS_HEAD.match(fh.read(256)):
                return True
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("chaos"), dict)
