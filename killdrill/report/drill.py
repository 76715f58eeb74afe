"""Reports: text for a person woken at 3 a.m., JSON for machines.

The text says what broke (which effect, how many times, under which keys), how each
attempt ended and where its kill landed, and how to reproduce the case in one line.
It never dumps internals: everything printed is something a person acts on.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from killdrill.points import parse_fault
from killdrill.records import (
    DRAINED,
    EXITED,
    KILLED,
    Attempt,
    AttemptOutcome,
    Call,
    CaseResult,
    Discovery,
    DrillResult,
    Presenter,
    Verdict,
    Violation,
)
from killdrill.report.jsonfile import dumps as json_text
from killdrill.report.outputs import atomic_write_text
from killdrill.report.waits import WaitTally, waits_line
from killdrill.verdict import format_identity, unknown_calls
from killdrill.verdict.model_work import model_work, render_model_work, sum_model_work
from killdrill.verdict.phrases import is_row

__all__ = [
    "drill_json",
    "load_report",
    "render_case",
    "render_cases",
    "render_catalogue",
    "render_drill",
    "summarize_cases",
    "write_json",
]

_NOTE_GLOSS = {
    "resumed_from_start": (
        "the resumed attempt re-entered at the first boundary although a checkpoint existed:"
        " the input was re-submitted instead of resuming from the checkpoint"
    ),
}
_STDERR_LINES = 12
_RUN_CAUSES = frozenset(
    {"unfinished_resume", "run_not_completed", "resume_crashed", "hang", "point_not_reached", "harness_error"}
)  # causes about the run, not one effect (killdrill.verdict.causes.CauseName)
_SUMMARY_LABELS = (
    ("exactly_once", str(Verdict.EXACTLY_ONCE)),
    ("duplicated", "duplicated"),
    ("lost", "lost"),
    ("unexpected", "unexpected"),
    ("consequence", "changed only by another violation's id"),
)


def _command(command: Sequence[str]) -> str:
    return shlex.join(command)


def _verdict(result: CaseResult) -> str:
    return "EXACTLY-ONCE" if result.ok else "VIOLATED"


def _reproduce(result: CaseResult) -> list[str]:
    """The case's reproduction lines; a ``killdrill run`` line is built when none was given,
    so a report never ends without a way back to the failure."""
    lines = [result.reproduce] if result.reproduce else []
    if not lines:
        seed = f" --seed {result.seed}" if result.seed is not None else ""
        lines.append(
            f"killdrill run --schedule {shlex.quote(result.schedule or 'none')}{seed}"
            f" -- {_command(result.command)}"
        )
    lines.extend(x for x in result.extra_reproduce if x)
    return lines


def _gloss(note: str) -> str:
    for name, text in _NOTE_GLOSS.items():
        if note == name:
            return f"{name}: {text}"
    return note


def _call_line(call: Call, lost: Mapping[int, str], prev: Call | None, who: Mapping[int, str]) -> str:
    key = call.key if call.key is not None else "(no key)"
    made_by = f" ({who[call.attempt]})" if call.attempt in who else ""  # a deployment's process
    if is_row(call):  # a row of the agent's own database: what it holds, no key
        row = f"row {format_identity(call.payload)}"
        return f"attempt {call.attempt}{made_by}  {row}" if call.attempt else row
    parts = [f"attempt {call.attempt}{made_by}", f"key {key}", call.outcome]
    if call.replayed:
        parts.append("replayed")
    if call.effect_id:
        parts.append(f"effect {call.effect_id}")
    text = "  ".join(parts)
    if call.seq in lost:
        text += f"  — response lost (killed at {lost[call.seq]})"
    if prev is not None and prev.key != call.key:
        was = prev.key if prev.key is not None else "no key"
        text += f"  <- key changed (was {was})"
    return text


def _render_violation(
    i: int,
    v: Violation,
    lost: Mapping[int, str],
    shown: dict[tuple[int, ...], int],
    who: Mapping[int, str] | None = None,
) -> list[str]:
    """A violation and its calls; calls already listed under an earlier violation are referred to."""
    lines = [f"  {i}. {v.kind}: {v.message}"]
    seqs = tuple(c.seq for c in v.calls)
    if seqs and seqs in shown:
        lines.append(f"       (same calls as {shown[seqs]}.)")
        return lines
    else:
        shown.setdefault(seqs, i)
        prev: Call | None = None
        for call in v.calls:
            lines.append(f"       {_call_line(call, lost, prev, who or {})}")
            prev = call
    lines.extend(diagnosis_lines(v, indent="       "))
    return lines


def diagnosis_lines(v: Violation, indent: str) -> list[str]:
    """A violation's cause and fix, then the consequences listed under it (not counted on their own)."""
    lines = []
    if v.cause:
        lines.append(f"{indent}cause: {v.cause}" + (f" — {v.observed}" if v.observed else ""))
    if v.fix:
        lines.append(f"{indent}fix: {v.fix}")
    if v.consequences:
        lines.append(
            f"{indent}consequences (other effects that differ from the baseline only by this one's id):"
        )
        lines.extend(f"{indent}  - {k.kind}: {k.message}" for k in v.consequences)
    return lines


def causes_lines(cases: Iterable[CaseResult]) -> list[str]:
    """Each distinct root cause over the failed cases, with its fix: the last lines a CI log shows.

    A cause about one effect (a key, a provider) is listed per effect; a cause about the run (an
    unfinished resume, a run that stopped) once, with the effects it dropped."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for case in cases:
        for v in case.violations:
            if not v.cause:
                continue
            effect = f"{v.provider}.{v.op}" if v.provider and v.op else ""
            key = (v.cause, "" if v.cause in _RUN_CAUSES else effect)
            g = groups.setdefault(key, {"first": v, "cases": {}, "kinds": {}, "effects": {}})
            g["cases"].setdefault(case.schedule or "none", v.observed)  # each case's own circumstances
            g["kinds"][v.kind] = None
            if effect:
                g["effects"][effect] = None
    if not groups:
        return []
    n = len(groups)
    lines = [f"{n} root cause{'s' if n != 1 else ''}, and the fix for each:"]
    for (cause, _), g in groups.items():
        v, schedules = g["first"], list(g["cases"])
        what = ", ".join(g["effects"]) or "the run"
        shown = ", ".join(schedules[:3]) + (", ..." if len(schedules) > 3 else "")
        count = f"{len(schedules)} case{'s' if len(schedules) != 1 else ''}"
        lines.append(f"  {cause}: {what} ({', '.join(g['kinds'])}) in {count}: {shown}")
        seen = {text for text in g["cases"].values() if text}
        if len(seen) == 1:
            lines.append(f"    observed: {seen.pop()}")
        elif seen:  # the circumstances differ per case: each quoted with its own case
            for schedule in schedules[:3]:
                if g["cases"][schedule]:
                    lines.append(f"    observed in {schedule}: {g['cases'][schedule]}")
        if v.fix:
            lines.append(f"    fix: {v.fix}")
    return lines


def _how_ended(a: Attempt) -> str:
    rc = f"rc {a.returncode}" if a.returncode is not None else "no exit status"
    sig = ""
    if a.signal:
        sig = " by " + (a.signal if a.signal.upper().startswith("SIG") else f"SIG{a.signal}")
    if a.outcome == KILLED:
        where = f" at {a.killed_at}" if a.killed_at else ""
        return f"killed{sig}{where} ({rc})"
    if a.outcome == EXITED:
        return f"exited {rc}" + ("" if a.returncode == 0 else " — crashed")
    if a.outcome == DRAINED:
        return f"drained ({rc})"
    if a.outcome == AttemptOutcome.HANG:
        return f"hung: killed by the per-attempt timeout{sig} ({rc})"
    if a.outcome == AttemptOutcome.POINT_NOT_REACHED:
        return f"exited before the scheduled point was reached ({rc})"
    if a.outcome == AttemptOutcome.HARNESS_ERROR:
        return f"harness error ({rc})"
    return f"{a.outcome} ({rc})"


def _crashed(a: Attempt) -> bool:
    if a.outcome == EXITED:
        return a.returncode not in (0, None)
    return a.outcome in (AttemptOutcome.HANG, AttemptOutcome.POINT_NOT_REACHED, AttemptOutcome.HARNESS_ERROR)


def _fault_word(text: str) -> str:
    """``kill`` for a kill (a power loss included: the kill comes first), ``fault`` for one that
    kills nothing of the attempt it is aimed at (``drop:``, ``pause:``, ``restart=``, ``cut=``)."""
    try:
        return "kill" if parse_fault(text).is_kill else "fault"
    except ValueError:
        return "kill"


def _render_attempt(a: Attempt) -> list[str]:
    kill = f"{_fault_word(a.kill)} {a.kill}" if a.kill else "ran free"
    who = f" ({a.process})" if a.process else ""
    head = f"  {a.number}.{who} {kill}: {_how_ended(a)}, {a.duration_ms:.0f} ms"
    if a.killed_at and a.outcome != KILLED:
        head += f", kill landed at {a.killed_at}"
    lines = [head]
    lines.extend(f"     note: {_gloss(n)}" for n in a.notes)
    if _crashed(a) and a.stderr_tail.strip():
        tail = a.stderr_tail.rstrip().splitlines()[-_STDERR_LINES:]
        lines.append("     stderr (last lines):")
        lines.extend(f"       | {line}" for line in tail)
    return lines


def _effects_line(summary: Mapping[str, Mapping[str, int]]) -> str:
    parts = []
    for provider in sorted(summary):
        counts = summary[provider]
        shown = [f"{counts.get(k, 0)} {label}" for k, label in _SUMMARY_LABELS if counts.get(k, 0)]
        parts.append(f"{provider} " + (", ".join(shown) if shown else "none"))
    return "; ".join(parts)


def render_case(result: CaseResult, *, causes: bool = True) -> str:
    """One case, for a person: verdict line, each violation with its calls, cause and fix, the
    attempts, notes, the workdir, the lines that reproduce it, then (``causes``) the causes and fixes
    again, last, where a CI log's tail shows them."""
    kinds = f": {', '.join(result.kinds)}" if result.kinds else ""
    lines = [f"{_verdict(result)} [{result.schedule or 'none'}] {_command(result.command)}{kinds}"]
    lost = unknown_calls(result.ledger.calls, result.attempts) if result.ledger else _lost(result.violations)
    if result.violations:
        lines.append("")
        n = len(result.violations)
        lines.append(f"{n} violation{'s' if n != 1 else ''}:")
        shown: dict[tuple[int, ...], int] = {}
        for i, v in enumerate(result.violations, 1):
            who = {a.number: a.process for a in result.attempts if a.process}
            lines.extend(_render_violation(i, v, lost, shown, who))
    if result.summary:
        lines.append("")
        lines.append(f"Effects: {_effects_line(result.summary)}")
    if result.model:
        lines.append(("" if result.summary else "\n") + f"Model: {render_model_work(result.model)}")
    if result.attempts:
        lines.append("")
        lines.append(f"Attempts (thread {result.thread}):")
        for a in result.attempts:
            lines.extend(_render_attempt(a))
    if result.baseline:
        lines.append("")
        lines.append(f"Baseline: {result.baseline}")
    if result.notes:
        lines.append("")
        lines.append("Notes:")
        lines.extend(f"  - {_gloss(n)}" for n in result.notes)
    lines.append("")
    lines.extend(_workdir_lines(result))
    if result.seed is not None:
        lines.append(f"Seed: {result.seed}")
    lines.append("Reproduce:")
    lines.extend(f"  {line}" for line in _reproduce(result))
    tail = causes_lines([result]) if causes and not result.ok else []
    if tail:  # a CI log ends on what to change, not on the last reproduction line
        lines.append("")
        lines.extend(tail)
    return "\n".join(lines)


def _workdir_lines(result: CaseResult) -> list[str]:
    """Where the evidence is, if it is still there (a passing case's workdir is removed)."""
    if not result.workdir:
        return []
    state = Path(result.workdir) / ".killdrill"
    if not state.is_dir():
        if result.ok:
            return ["Workdir: removed (the case passed; --keep keeps passing workdirs)"]
        return [f"Workdir: {result.workdir} (no longer on disk)"]
    return [
        f"Workdir: {result.workdir}",
        f"  evidence in {state}/: plan.json, result.json, ledger.sqlite, attempt-N.stdout / .stderr",
    ]


def _lost(violations: Iterable[Violation]) -> dict[int, str]:
    """Responses lost, as the verdict recorded them (a report read back without its ledger)."""
    out: dict[int, str] = {}
    for v in violations:
        for c in v.detail.get("calls", ()):
            if isinstance(c, Mapping) and c.get("response_lost"):
                out[int(c["seq"])] = str(c["response_lost"])
    return out


def summarize_cases(cases: Iterable[CaseResult]) -> dict[str, Any]:
    """Counts for JSON and the summary line; ``by_kind`` counts cases showing each kind,
    ``providers`` sums the cases' per-provider effect counts."""
    by_kind: dict[str, int] = {}
    providers: dict[str, dict[str, int]] = {}
    total = ok = 0
    models: list[Any] = []  # one pass: a chaos job streams its cases from disk
    timed = WaitTally()
    for case in cases:
        timed.add(case)
        total += 1
        ok += case.ok
        if case.model:
            models.append(case.model)
        for kind in case.kinds:
            by_kind[kind] = by_kind.get(kind, 0) + 1
        for provider, counts in case.summary.items():
            into = providers.setdefault(provider, {k: 0 for k, _ in _SUMMARY_LABELS if k != "consequence"})
            for k, n in counts.items():
                into[k] = into.get(k, 0) + n
    out: dict[str, Any] = {
        "cases": total,
        "ok": ok,
        "violated": total - ok,
        "by_kind": dict(sorted(by_kind.items())),
        "providers": dict(sorted(providers.items())),
    }
    model = sum_model_work(models)
    if model:
        out["model"] = model
    waited = timed.dominant()
    if waited:
        out["waited"] = waited
    return out


def _summary_line(summary: Mapping[str, Any]) -> str:
    n, ok, bad = summary["cases"], summary["ok"], summary["violated"]
    text = f"{n} case{'s' if n != 1 else ''}: {ok} exactly-once"
    if bad:
        kinds = ", ".join(f"{k} x{c}" for k, c in summary["by_kind"].items())
        text += f", {bad} violated ({kinds})"
    return text


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _volatile_lines(volatile: Mapping[str, Sequence[str]]) -> list[str]:
    if not volatile:
        return []
    lines = ["Volatile fields (differed between two clean runs; left out of the identity):"]
    lines.extend(f"  {name}: {', '.join(fields)}" for name, fields in sorted(volatile.items()))
    return lines


def render_drill(result: DrillResult) -> str:
    """The whole drill: catalogue, each failed case, one row per case, the totals last."""
    return render_catalogue(result.discovery) + "\n\n" + render_cases(result.cases)


def render_cases(cases: Sequence[CaseResult]) -> str:
    """The full text of each failed case, one row per case, the root causes with their fixes, then
    the totals (the last line)."""
    rows = [("schedule", "verdict", "violations", "attempts")]
    for case in cases:
        verdict = str(Verdict.EXACTLY_ONCE) if case.ok else "VIOLATED"
        rows.append((case.schedule or "none", verdict, ",".join(case.kinds) or "-", str(len(case.attempts))))
    lines: list[str] = []
    for case in cases:  # first: a CI log ends on the causes and the totals, as the README promises
        if not case.ok:
            lines.append(render_case(case, causes=False))
            lines.append("=" * 78)
            lines.append("")
    lines += ["Cases:", *_table(rows), ""]
    summary = summarize_cases(cases)
    if summary["providers"]:
        lines.append(f"Effects over all cases: {_effects_line(summary['providers'])}")
    if summary.get("model"):
        lines.append(f"Model over all cases: {render_model_work(summary['model'])}")
    causes = causes_lines([case for case in cases if not case.ok])
    if causes:  # the root causes and their fixes: the last lines before the totals
        lines.append("")
        lines.extend(causes)
        lines.append("")
    waited = waits_line(cases)
    if waited:  # where the time went, when the runtime's own wait took most of it
        lines.append(waited)
    lines.append(_summary_line(summary))
    return "\n".join(lines)


def render_catalogue(discovery: Discovery) -> str:
    """``killdrill points``: each point a clean run reached, in order, with its occurrence
    count and offset from spawn, then the baseline's effects and any volatile fields."""
    n = len(discovery.catalogue)
    head = f"{n} kill point{'s' if n != 1 else ''} reached by a clean run"
    if discovery.duration_ms:
        head += f" ({discovery.duration_ms:.0f} ms)"
    lines = [f"{head} of: {_command(discovery.command)}"]
    totals = discovery.counts()
    if discovery.catalogue:
        rows = [("#", "point", "occurrence", "reached at")]
        rows += [
            (str(i), e.label, f"{e.occurrence} of {totals.get(e.point, 1)}", f"{e.t_ms:.1f} ms")
            for i, e in enumerate(discovery.catalogue, 1)
        ]
        lines.extend(_table(rows))
    effects: dict[str, int] = {}
    for call in discovery.baseline.calls:
        if call.landed:
            name = f"{call.provider}.{call.op}"
            effects[name] = effects.get(name, 0) + 1
    if effects:
        lines.append("Baseline effects: " + ", ".join(f"{k} x{v}" for k, v in effects.items()))
    work = model_work(discovery.baseline, discovery.baseline)
    if work:
        lines.append(
            f"Baseline model work: {work['calls']} calls, {work['tokens']} tokens (calls, never effects)"
        )
    if discovery.baseline.state:
        lines.append(f"Baseline kv state: {format_identity(discovery.baseline.state)}")
    lines.extend(_volatile_lines(discovery.volatile))
    if discovery.mode_reason:
        lines.append(f"Baseline mode: {discovery.mode} ({discovery.mode_reason})")
    listed = {e.label for e in discovery.catalogue}  # once, not per label: O(N^2) at N points
    others = [lb for lb in discovery.labels() if lb not in listed]
    if others:
        lines.append("Reached only under another thread: " + ", ".join(others))
    return "\n".join(lines)


def drill_json(result: DrillResult) -> dict[str, Any]:
    """The machine-readable drill: ``{"discovery", "cases": [...], "summary": {...}}``."""
    return result.to_dict()


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` (a dict, or anything with ``to_dict``) as indented JSON, atomically, so a
    reader (CI artifact upload, ``killdrill report``) never sees half a file."""
    data = obj.to_dict() if hasattr(obj, "to_dict") else obj
    return atomic_write_text(path, json_text(data) + "\n")  # json.dumps(indent=2) but fast


def load_report(path: str | os.PathLike[str]) -> tuple[Discovery | None, list[CaseResult]]:
    """Read a JSON report written by ``run``/``drill``/``chaos``: its discovery (if any) and cases.

    A file that is not such a report raises ``ValueError`` with a one-line reason.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
            raise ValueError('no "cases" list at the top level')
        cases = [CaseResult.from_dict(c) for c in data["cases"]]
        discovery = Discovery.from_dict(data["discovery"]) if data.get("discovery") else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a killdrill JSON report: {exc}") from exc
    return discovery, cases


PRESENTER = Presenter(case=render_case, drill=render_drill, summary=summarize_cases)
"""How results render (``CaseResult.text()``), installed by :mod:`killdrill.drill`, which makes them."""
