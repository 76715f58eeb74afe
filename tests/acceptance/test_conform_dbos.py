"""``killdrill conform --integration dbos``: DBOS's prefix continuation and consume-once hold, each
checked against the kept ledgers and DBOS's own system database, not only the table's word (a
harness that calls a property held when nothing was delivered twice would prove nothing)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.frameworks import need

need("dbos", "dbos")


def _calls(case: Path) -> list[tuple[str, str, str | None, str, int, int]]:
    with sqlite3.connect(case / ".killdrill" / "ledger.sqlite") as db:
        rows = db.execute("SELECT provider, op, key, outcome, attempt, pid FROM killdrill_calls ORDER BY seq")
        return [tuple(r) for r in rows]  # type: ignore[misc]


def test_dbos_prefix_and_consume_once(tmp_path: Path) -> None:
    out, root = tmp_path / "conform.json", tmp_path / "root"
    cmd = [sys.executable, "-m", "killdrill", "conform", "--integration", "dbos"]
    cmd += ["--property", "prefix_continuation", "--property", "consume_once"]
    cmd += ["--keep", "--root", str(root), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = {c["property"]: c for c in json.loads(out.read_text())["cells"]}
    assert cells["prefix_continuation"]["status"] == "holds", cells["prefix_continuation"]
    assert cells["consume_once"]["status"] == "holds", cells["consume_once"]

    # prefix: killed once DBOS recorded charge; the resume replayed it (no new call) and went on
    case = next((root / "dbos").glob("*committed_charge*"))
    charges = [c for c in _calls(case) if c[:2] == ("payments", "charge")]
    assert [(c[3], c[4]) for c in charges] == [("created", 1)], charges
    result = json.loads((case / ".killdrill" / "result.json").read_text())
    assert result["attempts"][0]["killed_at"] == "committed:charge"
    later = [e["point"] for a in result["attempts"][1:] for e in a["trace"]]
    assert "before:charge" not in later and "before:notify" in later
    assert "replayed step charge" in (case / ".killdrill" / "attempt-2.stderr").read_text()

    # consume-once: both resumers delivered (two messages in DBOS's queue), one was consumed, and
    # the approved email went out once
    case = next((root / "dbos").glob("*before_deliver*"))
    result = json.loads((case / ".killdrill" / "result.json").read_text())
    later = result["attempts"][1:]
    delivering = [a for a in later if any(e["point"] == "before:deliver" for e in a["trace"])]
    assert len(delivering) == 2, result["attempts"]
    with sqlite3.connect(case / "state" / "dbos.sqlite") as db:
        consumed = sorted(r[0] for r in db.execute("SELECT consumed FROM notifications"))
    assert consumed == [0, 1], consumed
    sends = [c for c in _calls(case) if c[:2] == ("mailbox", "send")]
    assert len(sends) == 1 and sends[0][3] == "created", sends
