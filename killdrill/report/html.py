"""A self-contained HTML page for a chaos report, for people who would rather look than read.

Inline CSS and SVG only (no script, font or image fetched), so it opens from disk, from
a CI artifact, or in a mail client.  Built from the ``report.json`` dict, so a merged
report of several shards renders the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from killdrill.records import DUPLICATE_EFFECT, Attempt, CaseResult, Verdict, ViolationKind

__all__ = ["render_html"]

_FAILED = (Verdict.VIOLATED, ViolationKind.HARNESS_ERROR)  # a run outcome, as its report says it

MAX_TIMELINES = 60
"""Failing runs are always drawn; clean ones only up to this many (the page stays light)."""

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#1d232b;background:#fff}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde3;padding-bottom:4px}
.sub{color:#5b6572}.cards{display:flex;gap:12px;flex-wrap:wrap;margin:14px 0}
.card{border:1px solid #d8dde3;border-radius:6px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:22px}.bad b{color:#c62828}.ok b{color:#2e7d32}
table{border-collapse:collapse}td,th{border:1px solid #d8dde3;padding:3px 8px;text-align:right}
th{background:#f3f5f7}
td.l,th.l{text-align:left;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
td.hot{background:#fde2e2;color:#b71c1c;font-weight:600}td.zero{color:#b0b7c0}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;border:1px solid #d8dde3;padding:8px;overflow:auto;white-space:pre-wrap}
.fail{border-left:4px solid #c62828;padding-left:10px;margin:12px 0}
.run{margin:10px 0}.run .h{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.tag{display:inline-block;border-radius:3px;padding:0 6px;font-size:11px;color:#fff;
background:#2e7d32;margin-right:6px}
.tag.violated{background:#c62828}.tag.missed{background:#8a94a0}
.tag.harness_error{background:#ef6c00}
.legend span{margin-right:16px}
svg text{font:10px ui-monospace,Menlo,Consolas,monospace;fill:#5b6572}
svg text.tick{fill:#3d5a80}svg text.outcome{fill:#1d232b}
details.clean>summary{cursor:pointer;color:#5b6572;margin:10px 0}
"""


def render_html(data: Mapping[str, Any]) -> str:
    """The whole page: summary cards, shrunk failures, interval x outcome matrix, timelines."""
    h, s = data["chaos"], data["summary"]
    cases = data["cases"]  # dicts: only the drawn ones are read (a job's page)
    runs = list(data["runs"])
    title = f"killdrill chaos — seed {h['seed']}"
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<div class='sub'>shard {escape(str(h['shard']))} · <code>{escape(' '.join(h['command']))}</code>"
        + (f" · stopped by {escape(str(h['stopped']))}" if h.get("stopped") not in (None, "runs") else "")
        + "</div>",
        _cards(s),
        _failures(data.get("failures") or []),
        _matrix(data["spread"], runs, data.get("html_counts")),
        _timelines(runs, cases, data.get("html_counts")),
        "</body></html>",
    ]
    return "\n".join(parts)


def _cards(s: Mapping[str, Any]) -> str:
    items = [
        ("runs", s["runs"], ""),
        (str(Verdict.EXACTLY_ONCE), s["runs_clean"], "ok"),
        (str(Verdict.VIOLATED), s["runs_violated"], "bad" if s["runs_violated"] else "ok"),
        ("no fault landed", s["runs_without_kill"], ""),
        ("faults landed", s["kills_landed"], ""),
        ("kills missed", s["kills_missed"], ""),
        ("harness errors", s["runs_harness_error"], "bad" if s["runs_harness_error"] else ""),
    ]
    cells = "".join(f"<div class='card {c}'><b>{v}</b>{escape(k)}</div>" for k, v, c in items)
    return f"<div class='cards'>{cells}</div>"


def _failures(failures: Sequence[Mapping[str, Any]]) -> str:
    out = ["<h2>Shrunk failures</h2>"]
    if not failures:
        out.append("<p class='sub'>None: every run that landed a kill was exactly-once.</p>")
    for f in failures:
        run = f" (run {f['index']})" if f.get("index") is not None else ""
        out.append(
            "<div class='fail'>"
            f"<div><b><code>{escape(f['schedule'])}</code></b> → {escape(', '.join(f['kinds']))}</div>"
            f"<div class='sub'>shrunk from <code>{escape(f['original'])}</code>{run}"
            f" in {f['shrink_runs']} case(s)</div>"
            + "".join(
                f"<div><code>{escape(v['kind'])}</code>: {escape(v['message'])}</div>"
                for v in (f.get("case") or {}).get("violations", ())
            )
            + f"<pre>{escape(f['reproduce'])}</pre>"
        )
        if f.get("case"):
            case = CaseResult.from_dict(f["case"])
            out.append(_timeline(case, {"outcome": Verdict.VIOLATED, "index": "shrunk"}))
        out.append("</div>")
    return "\n".join(out)


def matrix_counts(
    spread: Mapping[str, Mapping[str, int]], runs: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """What the page counts over every run, in one pass: the matrix, the kinds, kills missed and
    runs without a violation (a chaos job gives these with only some runs drawn: chaos.stream)."""
    kinds: set[str] = set()
    counts: dict[str, dict[str, int]] = {label: {} for label in spread}
    missed = good = 0
    for r in runs:
        kinds.update(r["kinds"])
        missed += r["missed"]
        good += r["outcome"] not in _FAILED
        for iv in r["landed"]:
            row = counts.setdefault(iv, {})
            for col in r["kinds"] or [str(Verdict.EXACTLY_ONCE)]:
                row[col] = row.get(col, 0) + 1
    return {"kinds": sorted(kinds), "matrix": counts, "missed": missed, "good": good}


def _matrix(
    spread: Mapping[str, Mapping[str, int]],
    runs: Sequence[Mapping[str, Any]],
    given: Mapping[str, Any] | None = None,
) -> str:
    """Rows: the interval a kill landed in; columns: the run's outcome (clean, or each kind)."""
    totals = given if given is not None else matrix_counts(spread, runs)
    columns = [str(Verdict.EXACTLY_ONCE), *totals["kinds"]]
    counts: Mapping[str, Mapping[str, int]] = totals["matrix"]
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    rows = []
    for label, row in counts.items():
        cells = []
        for c in columns:
            n = row.get(c, 0)
            cls = "zero" if n == 0 else ("hot" if c != Verdict.EXACTLY_ONCE else "")
            cells.append(f"<td class='{cls}'>{n}</td>")
        rows.append(f"<tr><td class='l'>{escape(label)}</td>{''.join(cells)}</tr>")
    missed = totals["missed"]
    return (
        "<h2>Kill spread: boundary interval &times; outcome</h2>"
        "<p class='sub'>Each landed kill counted in the interval from the boundary it last passed "
        "to the next one, "
        f"under its run's outcome. Kills that never landed (the run ended first): {missed}.</p>"
        f"<table><tr><th class='l'>interval from</th>{head}</tr>{''.join(rows)}</table>"
    )


def _timelines(
    runs: Sequence[Mapping[str, Any]],
    cases: Sequence[Mapping[str, Any] | None],
    given: Mapping[str, Any] | None = None,
) -> str:
    """Violated and errored runs drawn open (the first ``MAX_TIMELINES``, each later one a line with
    its kinds and reproduction); clean runs folded in a <details> (no script needed)."""
    pairs = list(zip(runs, cases, strict=True))
    failed = [p for p in pairs if p[0]["outcome"] in _FAILED]
    bad = [(r, CaseResult.from_dict(dict(c))) for r, c in failed[:MAX_TIMELINES] if c is not None]
    good = [p for p in pairs if p[0]["outcome"] not in _FAILED]
    room = max(0, MAX_TIMELINES - len(bad))
    drawn = [(run, CaseResult.from_dict(dict(case))) for run, case in good[:room] if case is not None]
    total_good = given["good"] if given is not None else len(good)
    out = [
        "<h2>Runs</h2>",
        "<p class='legend sub'><span>▏ boundary (hover for its name)</span>"
        "<span style='color:#c62828'>✕ kill</span>"
        "<span>● effect landed</span><span>○ replayed / refused</span>"
        "<span style='color:#c62828'>● duplicate</span></p>",
    ]
    out.extend(_timeline(case, run) for run, case in bad)
    if len(failed) > len(bad):
        out.append(f"<p class='sub'>{len(failed) - len(bad)} more failing run(s), not drawn (report.json and")
        out.append(" junit.xml have each in full):</p><table><tr><th>run</th><th class='l'>schedule</th>")
        out.append("<th class='l'>kinds</th><th class='l'>reproduce</th></tr>")
        out.extend(
            f"<tr><td>{r['index']}</td><td class='l'>{escape(r['schedule'])}</td>"
            f"<td class='l'>{escape(', '.join(r['kinds']))}</td>"
            f"<td class='l'>{escape(r.get('reproduce') or '')}</td></tr>"
            for r, _ in failed[len(bad) :]
        )
        out.append("</table>")
    if total_good:
        hidden = total_good - len(drawn)
        more = f"; {hidden} more not drawn" if hidden else ""
        out.append(
            f"<details class='clean'><summary>{total_good} run(s) without a violation{more}</summary>"
            + "".join(_timeline(case, run) for run, case in drawn)
            + "</details>"
        )
    return "\n".join(out)


def _duplicates(case: CaseResult) -> set[int]:
    """Seqs of calls that landed an effect again (every landing after the first, per violation)."""
    dup: set[int] = set()
    for v in case.violations:
        if v.kind == DUPLICATE_EFFECT:
            landed = [c.seq for c in v.calls if c.landed]
            dup.update(landed[1:])
    return dup


WIDTH, LEFT, RIGHT, LANE, AXIS = 1000, 70, 210, 44, 40
"""SVG geometry: attempt names left, outcome labels in their own right column (never clipped),
a lane per attempt with room for boundary labels above its line, the time axis below."""
_CHAR_PX = 6.1  # width of one character of the 10 px monospace labels


def _nice_step(span_ms: float, ticks: int = 6) -> float:
    raw = span_ms / ticks
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _fmt_ms(ms: float, step: float) -> str:
    return f"{ms / 1000:g} s" if step >= 100 and ms >= 1000 else f"{ms:g} ms"


class _Scale:
    """Milliseconds to x.  The start-up before the first boundary (imports, often 90% of an
    attempt) is cut when it dominates, so the boundaries get the width."""

    def __init__(self, attempts: Sequence[Attempt]) -> None:
        self.span = max([a.duration_ms for a in attempts] + [1.0])
        firsts = [a.trace[0].t_ms for a in attempts if a.trace]
        first = min(firsts) if firsts else 0.0
        self.t0 = first - 0.05 * (self.span - first) if first > 0.3 * self.span else 0.0
        self.per_ms = (WIDTH - LEFT - RIGHT) / max(self.span - self.t0, 1e-6)

    def x(self, t_ms: float) -> float:
        return LEFT + max(0.0, t_ms - self.t0) * self.per_ms


def _tick_labels(a: Attempt, scale: _Scale, y: float) -> list[str]:
    """Names of the boundaries, placed greedily where they do not overlap (the kill's last
    boundary first); every tick keeps its full name as a hover title."""
    order = list(range(len(a.trace)))
    if a.outcome in ("killed", "drained") and a.trace:
        order = [len(a.trace) - 1, *order[:-1]]
    taken: list[tuple[float, float]] = []
    out = []
    plot_end = WIDTH - RIGHT
    for i in order:
        e = a.trace[i]
        x = scale.x(e.t_ms)
        w = len(e.label) * _CHAR_PX
        x0 = min(max(LEFT, x - w / 2), plot_end - w)
        if any(x0 < b + 6 and a0 < x0 + w + 6 for a0, b in taken):
            continue
        taken.append((x0, x0 + w))
        out.append(f"<text class='tick' x='{x0:.1f}' y='{y - 11}'>{escape(e.label)}</text>")
    return out


def _axis(scale: _Scale, y: float) -> list[str]:
    step = _nice_step(scale.span - scale.t0)
    out = [f"<line x1='{LEFT}' y1='{y}' x2='{WIDTH - RIGHT}' y2='{y}' stroke='#c3cad3'/>"]
    t = math.ceil(scale.t0 / step) * step
    while t <= scale.span + 1e-9:
        x = scale.x(t)
        label = _fmt_ms(round(t, 6), step)
        anchor = "end" if x + len(label) * _CHAR_PX / 2 > WIDTH - RIGHT else "middle"
        out.append(f"<line x1='{x:.1f}' y1='{y}' x2='{x:.1f}' y2='{y + 4}' stroke='#c3cad3'/>")
        out.append(f"<text x='{x:.1f}' y='{y + 15}' text-anchor='{anchor}'>{label}</text>")
        t += step
    since = "time since each attempt started"
    if scale.t0 > 0:
        since += f"; its first {scale.t0:.0f} ms (start-up, before any boundary) are cut"
    out.append(f"<text x='{LEFT}' y='{y + 30}'>{since}</text>")
    return out


def _timeline(case: CaseResult, run: Mapping[str, Any]) -> str:
    """Attempts as lanes; boundaries as labelled ticks; the kill as a red cross; effects as dots."""
    scale = _Scale(case.attempts)
    dups = _duplicates(case)
    calls = list(case.ledger.calls) if case.ledger else []
    height = LANE * len(case.attempts) + AXIS
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' role='img'>"]
    for row, a in enumerate(case.attempts):
        y = row * LANE + 30
        x_end = scale.x(a.duration_ms)
        svg.append(f"<text x='0' y='{y + 4}'>attempt {a.number}</text>")
        dash = " stroke-dasharray='2 3'" if scale.t0 > 0 else ""
        svg.append(
            f"<line x1='{LEFT}' y1='{y}' x2='{min(x_end, LEFT + 8):.1f}' y2='{y}' stroke='#9aa5b1' "
            f"stroke-width='2'{dash}/>"
            f"<line x1='{min(x_end, LEFT + 8):.1f}' y1='{y}' x2='{x_end:.1f}' y2='{y}' stroke='#9aa5b1' "
            "stroke-width='2'/>"
        )
        for e in a.trace:
            x = scale.x(e.t_ms)
            svg.append(
                f"<line x1='{x:.1f}' y1='{y - 7}' x2='{x:.1f}' y2='{y + 7}' stroke='#3d5a80'>"
                f"<title>{escape(e.label)} at {e.t_ms:.1f} ms</title></line>"
            )
        svg.extend(_tick_labels(a, scale, y))
        mine = [c for c in calls if c.attempt == a.number]
        during = [e for e in a.trace if e.point.startswith("during:")]
        for c in mine:
            match = next((e for e in during if e.point == f"during:{c.provider}.{c.op}"), None)
            if match is not None:
                during.remove(match)
            x = scale.x(match.t_ms if match is not None else a.duration_ms)
            color = "#c62828" if c.seq in dups else "#2e7d32"
            fill = color if c.landed else "#fff"
            svg.append(
                f"<circle cx='{x:.1f}' cy='{y}' r='5' fill='{fill}' stroke='{color}' stroke-width='2'>"
                f"<title>{escape(f'{c.provider}.{c.op} key={c.key} {c.outcome}')}"
                f"{' — DUPLICATE' if c.seq in dups else ''}</title></circle>"
            )
        if a.killed_at is not None and a.outcome in ("killed", "drained"):
            svg.append(
                f"<g stroke='#c62828' stroke-width='3'>"
                f"<line x1='{x_end - 6:.1f}' y1='{y - 6}' x2='{x_end + 6:.1f}' "
                f"y2='{y + 6}'/><line x1='{x_end - 6:.1f}' y1='{y + 6}' x2='{x_end + 6:.1f}' y2='{y - 6}'/>"
                f"<title>killed at {escape(str(a.kill))} (last boundary: "
                f"{escape(a.trace[-1].label if a.trace else 'none')})</title></g>"
            )
        label = _ended(a)
        svg.append(
            f"<text class='outcome' x='{WIDTH - RIGHT + 14}' y='{y + 4}'>{escape(label)}"
            f"<title>{escape(label)}, {a.duration_ms:.1f} ms</title></text>"
        )
    svg.extend(_axis(scale, LANE * len(case.attempts) + 4))
    svg.append("</svg>")
    outcome = str(run.get("outcome", "clean"))
    kinds = ", ".join(case.kinds)
    head = (
        f"<div class='h'><span class='tag {escape(outcome)}'>{escape(outcome)}</span>"
        f"{escape(str(run.get('noun', 'run')))} {escape(str(run.get('index')))} "
        f"<b>{escape(case.schedule)}</b>{(' — ' + escape(kinds)) if kinds else ''}</div>"
    )
    causes = "".join(
        f"<li><code>{escape(v.kind)}</code> — cause <code>{escape(v.cause)}</code>: {escape(v.observed)}"
        f"<br>fix: {escape(v.fix)}"
        + (f" ({len(v.consequences)} consequence(s) listed under it)" if v.consequences else "")
        + "</li>"
        for v in case.violations
        if v.cause
    )
    diagnosis = f"<ul class='causes'>{causes}</ul>" if causes else ""
    return f"<div class='run'>{head}{''.join(svg)}{diagnosis}</div>"


def _ended(a: Attempt) -> str:
    """How an attempt ended, in words: never a violation's name for a run that had none."""
    rc = a.returncode
    if a.outcome == "killed":
        return "killed"
    if a.outcome == "exited":
        return "exited 0" if rc == 0 else f"crashed (exit {rc})"
    if a.outcome == "point_not_reached":
        return "ran to the end: kill missed" if rc == 0 else f"exited {rc} before its kill"
    if a.outcome == "drained":
        return f"drained (exit {rc})"
    if a.outcome == "hang":
        return "hung: killed by timeout"
    return f"{a.outcome.replace('_', ' ')}" + (f" (exit {rc})" if rc is not None else "")
