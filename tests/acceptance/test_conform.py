"""``killdrill conform --quick``: the table's shape, a property known to hold (LangGraph's prefix
continuation) and one known to be violated (LangGraph's consume-once under 2 concurrent
resumers), each checked against the kept ledgers, not only the table's word."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.frameworks import need

need("langgraph", "langgraph")
need("llama-index", "workflows")

STATUSES = {"holds", "violated", "n/a", "not installed", "not probed", "error"}


def _calls(workdir: Path) -> list[tuple[str, str, str | None, str, int, int]]:
    with sqlite3.connect(workdir / ".killdrill" / "ledger.sqlite") as db:
        rows = db.execute("SELECT provider, op, key, outcome, attempt, pid FROM killdrill_calls ORDER BY seq")
        return [tuple(r) for r in rows]  # type: ignore[misc]


def test_quick_table(tmp_path: Path) -> None:
    out, md = tmp_path / "conform.json", tmp_path / "conform.md"
    root = tmp_path / "root"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "killdrill",
            "conform",
            "--quick",
            "--keep",
            "--root",
            str(root),
            "--json",
            str(out),
            "--markdown",
            str(md),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = json.loads(out.read_text())
    assert table["format"] == "killdrill-conform/1"
    assert table["properties"] == ["prefix_continuation", "consume_once"]
    assert list(table["frameworks"]) == ["langgraph", "llama_index"]
    cells = {(c["framework"], c["property"]): c for c in table["cells"]}
    assert len(cells) == 4 and all(c["status"] in STATUSES and c["evidence"] for c in cells.values())
    assert all(table["frameworks"][f]["version"] for f in table["frameworks"])
    for fw in table["frameworks"]:
        assert f"{table['frameworks'][fw]['title']} {table['frameworks'][fw]['version']}" in proc.stdout
    assert md.read_text().startswith("| property | LangGraph ")

    held = cells[("langgraph", "prefix_continuation")]
    assert held["status"] == "holds", held
    # read it ourselves: killed at committed:charge, the charge sent once (attempt 1), never again
    case = next((root / "langgraph").glob("*committed_charge*"))
    charges = [c for c in _calls(case) if c[:2] == ("payments", "charge")]
    assert [(c[3], c[4]) for c in charges] == [("created", 1)], charges
    result = json.loads((case / ".killdrill" / "result.json").read_text())
    assert result["attempts"][0]["killed_at"] == "committed:charge"
    later = [e["point"] for a in result["attempts"][1:] for e in a["trace"]]
    assert "before:charge" not in later and "before:notify" in later

    broken = cells[("langgraph", "consume_once")]
    assert broken["status"] == "violated", broken
    assert "--resumers 2" in broken["reproduce"] and "mailbox.send" in broken["evidence"]
    # read it ourselves: two resumers (two pids) each sent the approved email
    case = next((root / "langgraph").glob("*before_deliver*"))
    sends = [c for c in _calls(case) if c[:2] == ("mailbox", "send")]
    assert len(sends) == 2 and len({c[5] for c in sends}) == 2 and all(c[3] == "created" for c in sends), (
        sends
    )
