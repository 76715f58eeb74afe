"""The HTML page of a drill (``killdrill drill --report DIR``), from the chaos report's renderer.

Same page as chaos's ``report.html`` (:mod:`killdrill.report.html`: inline CSS and SVG, no
script, opens from disk or a CI artifact), for a drill's cases: summary cards, one block per
violated case (its verdict text, reproduction line last, and its timeline), the clean cases'
timelines folded.  Built from the drill's JSON dict (``DrillResult.to_dict()``), like chaos's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from killdrill.records import CaseResult, Verdict
from killdrill.report.drill import render_case, write_json
from killdrill.report.html import _CSS, MAX_TIMELINES, _timeline
from killdrill.report.outputs import atomic_write_text

__all__ = ["render_drill_html", "write_drill_reports"]


def write_drill_reports(
    folder: str | os.PathLike[str], data: Mapping[str, Any], command: Sequence[str]
) -> None:
    """``report.json`` (what ``--json`` writes) and a self-contained ``report.html`` in ``folder``."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "report.json", dict(data))
    atomic_write_text(out / "report.html", render_drill_html(data, command))


def render_drill_html(data: Mapping[str, Any], command: Sequence[str] = ()) -> str:
    """The whole page: cards, the violated cases (text and timeline), the clean ones folded."""
    s = data["summary"]
    cases = [CaseResult.from_dict(c) for c in data["cases"]]
    shown = command or (cases[0].command if cases else ())
    title = "killdrill drill"
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<div class='sub'><code>{escape(' '.join(shown))}</code></div>",
        _cards(s),
        _table(cases),
        _failed(cases),
        _clean(cases),
        "</body></html>",
    ]
    return "\n".join(parts)


def _cards(s: Mapping[str, Any]) -> str:
    items: list[tuple[str, Any, str]] = [
        ("cases", s["cases"], ""),
        (str(Verdict.EXACTLY_ONCE), s["ok"], "ok"),
        (str(Verdict.VIOLATED), s["violated"], "bad" if s["violated"] else "ok"),
    ]
    items += [(kind, n, "bad") for kind, n in s.get("by_kind", {}).items()]
    cells = "".join(f"<div class='card {c}'><b>{v}</b>{escape(k)}</div>" for k, v, c in items)
    return f"<div class='cards'>{cells}</div>"


def _run(case: CaseResult, index: int) -> dict[str, Any]:
    """What the timeline's header reads: chaos's run outcome, for a drill's case."""
    return {"outcome": "clean" if case.ok else Verdict.VIOLATED, "index": index, "noun": "case"}


def _table(cases: Sequence[CaseResult]) -> str:
    rows = []
    for i, case in enumerate(cases, 1):
        verdict = str(Verdict.EXACTLY_ONCE) if case.ok else "VIOLATED"
        cls = "" if case.ok else "hot"
        rows.append(
            f"<tr><td>{i}</td><td class='l'>{escape(case.schedule or 'none')}</td>"
            f"<td class='l {cls}'>{verdict}</td><td class='l'>{escape(', '.join(case.kinds) or '-')}</td>"
            f"<td>{len(case.attempts)}</td></tr>"
        )
    head = "<tr><th>#</th><th class='l'>schedule</th><th class='l'>verdict</th>"
    head += "<th class='l'>violations</th><th>attempts</th></tr>"
    return f"<h2>Cases</h2><table>{head}{''.join(rows)}</table>"


def _failed(cases: Sequence[CaseResult]) -> str:
    bad = [(i, c) for i, c in enumerate(cases, 1) if not c.ok]
    out = ["<h2>Violated cases</h2>"]
    if not bad:
        out.append("<p class='sub'>None: every case was exactly-once.</p>")
    for i, case in bad:
        out.append(
            "<div class='fail'>"
            + _timeline(case, _run(case, i))
            + f"<pre>{escape(render_case(case))}</pre>"
            + "</div>"
        )
    return "\n".join(out)


def _clean(cases: Sequence[CaseResult]) -> str:
    good = [(i, c) for i, c in enumerate(cases, 1) if c.ok]
    if not good:
        return ""
    drawn = good[:MAX_TIMELINES]
    hidden = len(good) - len(drawn)
    more = f"; {hidden} more not drawn" if hidden else ""
    return (
        f"<details class='clean'><summary>{len(good)} case(s) without a violation{more}</summary>"
        + "".join(_timeline(case, _run(case, i)) for i, case in drawn)
        + "</details>"
    )
