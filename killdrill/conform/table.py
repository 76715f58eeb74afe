"""The table: property x framework, in text (for a person), JSON and Markdown (for the README)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from killdrill.conform.frameworks import frameworks
from killdrill.conform.properties import HOLDS, PROPERTIES, Cell

FORMAT = "killdrill-conform/1"


def _titles() -> dict[str, str]:
    return {f.name: f.title for f in frameworks()}


def _columns(cells: Sequence[Cell]) -> list[str]:
    return list(dict.fromkeys(c.framework for c in cells))


def _rows(cells: Sequence[Cell]) -> list[str]:
    present = {c.property for c in cells}
    return [p for p in PROPERTIES if p in present]


def _header(cells: Sequence[Cell], fw: str) -> str:
    version = next((c.version for c in cells if c.framework == fw and c.version), None)
    return f"{_titles().get(fw, fw)} {version}" if version else _titles().get(fw, fw)


def _grid(cells: Sequence[Cell]) -> dict[tuple[str, str], Cell]:
    return {(c.property, c.framework): c for c in cells}


def _notes(cells: Sequence[Cell]) -> list[Cell]:
    """One note per cell, except that a framework whose every cell says the same (not installed,
    no integration) gets one note for all of them, under the property ``every property``."""
    out: list[Cell] = []
    for fw in _columns(cells):
        mine = [c for c in cells if c.framework == fw]
        if len(mine) > 1 and len({(c.status, c.evidence) for c in mine}) == 1 and mine[0].status != HOLDS:
            out.append(replace(mine[0], property="every property"))
        else:
            out.extend(mine)
    return out


def render_text(cells: Sequence[Cell]) -> str:
    cols, rows, grid = _columns(cells), _rows(cells), _grid(cells)
    heads = [_header(cells, f) for f in cols]
    width0 = max([len(r) for r in rows] + [8])
    widths = [max(len(h), 13) for h in heads]
    lines = ["  ".join(["property".ljust(width0), *(h.ljust(w) for h, w in zip(heads, widths, strict=True))])]
    for r in rows:
        marks = [
            (grid[(r, f)].status if (r, f) in grid else "-").ljust(w)
            for f, w in zip(cols, widths, strict=True)
        ]
        lines.append("  ".join([r.ljust(width0), *marks]))
    lines.append("")
    for c in _notes(cells):
        lines.append(f"{c.property} / {_header(cells, c.framework)}: {c.status}: {c.evidence}")
        if c.status != HOLDS and c.reproduce:
            lines.append(f"    reproduce: {c.reproduce}")
    return "\n".join(lines).rstrip() + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _portable(command: str) -> str:
    """A reproduction command without this machine's install path: the README's table is the
    same from any install (a bundled probe's file is ``<site-packages>/killdrill/...``)."""
    home = str(Path(__file__).resolve().parents[2])  # where the killdrill package is installed
    return command.replace(home + os.sep, "<site-packages>/")


def render_markdown(cells: Sequence[Cell]) -> str:
    cols, rows, grid = _columns(cells), _rows(cells), _grid(cells)
    lines = ["| property | " + " | ".join(_header(cells, f) for f in cols) + " |"]
    lines.append("|---|" + "---|" * len(cols))
    for r in rows:
        marks = [f"**{grid[(r, f)].status}**" if (r, f) in grid else "-" for f in cols]
        lines.append(f"| {r} | " + " | ".join(marks) + " |")
    lines.append("")
    for c in _notes(cells):
        line = f"- **{c.property}, {_header(cells, c.framework)}: {c.status}.** {_md(c.evidence)}"
        if c.status != HOLDS and c.reproduce:
            line += f" Reproduce: `{_portable(c.reproduce)}`"
        lines.append(line)
    return "\n".join(lines) + "\n"


def to_json(cells: Sequence[Cell]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "frameworks": {
            f: {
                "title": _titles().get(f, f),
                "version": next((c.version for c in cells if c.framework == f and c.version), None),
            }
            for f in _columns(cells)
        },
        "properties": _rows(cells),
        "cells": [c.to_dict() for c in cells],
    }


def load_cells(path: str) -> list[Cell]:
    """The cells of a table written by ``--json`` (``--merge``: a framework's, run in a venv of its own)."""
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a killdrill conform table ({FORMAT})")
    return [Cell.from_dict(c) for c in data["cells"]]


def merge(cells: Sequence[Cell], others: Sequence[Cell]) -> list[Cell]:
    """``cells`` with each cell that could not run here (not installed) replaced by another table's."""
    theirs = {(c.property, c.framework): c for c in others if c.status != "not installed"}
    out = [theirs.get((c.property, c.framework), c) if c.status == "not installed" else c for c in cells]
    have = {(c.property, c.framework) for c in out}
    out += [c for k, c in theirs.items() if k not in have]
    order = {f.name: i for i, f in enumerate(frameworks())}
    return sorted(out, key=lambda c: (order.get(c.framework, 99), PROPERTIES.index(c.property)))
