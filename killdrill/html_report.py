"""A self-contained HTML page for a chaos report, for people who would rather look than read.

Inline CSS and SVG only (no script, font or image fetched), so it opens from disk, from
a CI artifact, or in a mail client.  Built from the ``report.json`` dict, so a merged
report of several shards renders the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from killdrill.records import DUPLICATE_EFFECT, CaseResult

__all__ = ["render_html"]

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
"""


def render_html(data: Mapping[str, Any]) -> str:
    """The whole page: summary cards, shrunk failures, interval x outcome matrix, timelines."""
    h, s = data["chaos"], data["summary"]
    cases = [CaseResult.from_dict(c) for c in data["cases"]]
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
        _matrix(data["spread"], runs),
        _timelines(runs, cases),
        "</body></html>",
    ]
    return "\n".join(parts)


def _cards(s: Mapping[str, Any]) -> str:
    items = [
        ("runs", s["runs"], ""),
        ("exactly-once", s["runs_clean"], "ok"),
        ("violated", s["runs_violated"], "bad" if s["runs_violated"] else "ok"),
        ("no kill landed", s["runs_without_kill"], ""),
        ("kills landed", s["kills_landed"], ""),
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
            f"<pre>{escape(f['reproduce'])}</pre>"
        )
        if f.get("case"):
            case = CaseResult.from_dict(f["case"])
            out.append(_timeline(case, {"outcome": "violated", "index": "shrunk"}))
        out.append("</div>")
    return "\n".join(out)


def _matrix(spread: Mapping[str, Mapping[str, int]], runs: Sequence[Mapping[str, Any]]) -> str:
    """Rows: the interval a kill landed in; columns: the run's outcome (clean, or each kind)."""
    columns = ["exactly-once", *sorted({k for r in runs for k in r["kinds"]})]
    counts: dict[str, dict[str, int]] = {label: {} for label in spread}
    for r in runs:
        for iv in r["landed"]:
            row = counts.setdefault(iv, {})
            for col in r["kinds"] or ["exactly-once"]:
                row[col] = row.get(col, 0) + 1
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    rows = []
    for label, row in counts.items():
        cells = []
        for c in columns:
            n = row.get(c, 0)
            cls = "zero" if n == 0 else ("hot" if c != "exactly-once" else "")
            cells.append(f"<td class='{cls}'>{n}</td>")
        rows.append(f"<tr><td class='l'>{escape(label)}</td>{''.join(cells)}</tr>")
    missed = sum(r["missed"] for r in runs)
    return (
        "<h2>Kill spread: boundary interval &times; outcome</h2>"
        "<p class='sub'>Each landed kill counted in the interval from the boundary it last passed "
        "to the next one, "
        f"under its run's outcome. Kills that never landed (the run ended first): {missed}.</p>"
        f"<table><tr><th class='l'>interval from</th>{head}</tr>{''.join(rows)}</table>"
    )


def _timelines(runs: Sequence[Mapping[str, Any]], cases: Sequence[CaseResult]) -> str:
    pairs = list(zip(runs, cases, strict=True))
    bad = [p for p in pairs if p[0]["outcome"] in ("violated", "harness_error")]
    good = [p for p in pairs if p[0]["outcome"] not in ("violated", "harness_error")][
        : max(0, MAX_TIMELINES - len(bad))
    ]
    out = [
        "<h2>Runs</h2>",
        "<p class='legend sub'><span>▏ boundary</span><span style='color:#c62828'>✕ kill</span>"
        "<span>● effect landed</span><span>○ replayed / refused</span>"
        "<span style='color:#c62828'>● duplicate</span></p>",
    ]
    if len(good) + len(bad) < len(pairs):
        out.append(f"<p class='sub'>{len(pairs) - len(good) - len(bad)} clean run(s) not drawn.</p>")
    for run, case in bad + good:
        out.append(_timeline(case, run))
    return "\n".join(out)


def _duplicates(case: CaseResult) -> set[int]:
    """Seqs of calls that landed an effect again (every landing after the first, per violation)."""
    dup: set[int] = set()
    for v in case.violations:
        if v.kind == DUPLICATE_EFFECT:
            landed = [c.seq for c in v.calls if c.landed]
            dup.update(landed[1:])
    return dup


def _timeline(case: CaseResult, run: Mapping[str, Any]) -> str:
    """Attempts as lanes; boundaries as ticks; the kill as a red cross; effects as dots."""
    width, left, lane = 1000, 70, 30
    span = max([a.duration_ms for a in case.attempts] + [1.0])
    scale = (width - left - 20) / span
    dups = _duplicates(case)
    calls = list(case.ledger.calls) if case.ledger else []
    svg = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{lane * len(case.attempts) + 22}' "
        "role='img'>"
    ]
    for row, a in enumerate(case.attempts):
        y = row * lane + 16
        x_end = left + a.duration_ms * scale
        svg.append(f"<text x='0' y='{y + 4}'>attempt {a.number}</text>")
        svg.append(
            f"<line x1='{left}' y1='{y}' x2='{x_end:.1f}' y2='{y}' stroke='#9aa5b1' stroke-width='2'/>"
        )
        for e in a.trace:
            x = left + e.t_ms * scale
            svg.append(
                f"<line x1='{x:.1f}' y1='{y - 7}' x2='{x:.1f}' y2='{y + 7}' stroke='#3d5a80'>"
                f"<title>{escape(e.label)} at {e.t_ms:.1f} ms</title></line>"
            )
        mine = [c for c in calls if c.attempt == a.number]
        during = [e for e in a.trace if e.point.startswith("during:")]
        for c in mine:
            match = next((e for e in during if e.point == f"during:{c.provider}.{c.op}"), None)
            if match is not None:
                during.remove(match)
            x = left + (match.t_ms if match is not None else a.duration_ms) * scale
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
        svg.append(f"<text x='{x_end + 10:.1f}' y='{y + 4}'>{escape(_ended(a.outcome, a.returncode))}</text>")
    svg.append("</svg>")
    outcome = str(run.get("outcome", "clean"))
    kinds = ", ".join(case.kinds)
    head = (
        f"<div class='h'><span class='tag {escape(outcome)}'>{escape(outcome)}</span>"
        f"run {escape(str(run.get('index')))} "
        f"<b>{escape(case.schedule)}</b>{(' — ' + escape(kinds)) if kinds else ''}</div>"
    )
    return f"<div class='run'>{head}{''.join(svg)}</div>"


def _ended(outcome: str, rc: int | None) -> str:
    return f"{outcome}" + (f" rc {rc}" if rc is not None and outcome != "killed" else "")
