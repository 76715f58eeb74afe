"""The runtime's own server as the dependency that dies: ``restart=temporal:TRIGGER`` kills the
Temporal dev server the integration runs for the drill when the worker's activity reaches a point,
and starts it again on the same database file and port, as a real server restarts.

The transfer sample (``killdrill.examples.transfer_temporal``: a worker and a starter, activities
with Temporal's default retry policy, start-to-close 2 s).  The server dies as the worker's
charge lands.  Down briefly, the worker's completion reaches the restarted server and the
activity ran once.  Down longer than the activity's start-to-close, the server times it out when
it is back and the runtime runs it again: a keyed charge is replayed (exactly-once), an unkeyed
one charges twice (duplicate).  Whatever the drill says, it is checked against the ledger read
here: caught if and only if two charges were created.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from tests.cli_support import run_cli
from tests.frameworks import need
from tests.leftovers import survivors

need("temporal", "temporalio")

SAMPLE = "killdrill.examples.transfer_temporal"
FAULT = "restart=temporal:worker:during:payments.charge"


def _drill(tmp_path: Path, *args: str, bug: bool) -> tuple[int, str, list[dict[str, object]]]:
    root = tmp_path / "w"
    worker = f"worker=python -m {SAMPLE} worker --task-queue {{thread}}" + (" --bug unkeyed" if bug else "")
    out = run_cli(
        tmp_path,
        "run", "--discovery-runs", "1", "--root", str(root), "--keep", "--timeout", "30",
        "--integration", "temporal", "--schedule", FAULT, *args,
        "--serve", worker,
        "--", "python", "-m", SAMPLE, "starter", "--thread", "{thread}", "--task-queue", "{thread}",
    )  # fmt: skip
    assert not survivors(str(root), seconds=0.3), "a process of the case survived it"
    (case,) = [d for d in root.iterdir() if d.name.startswith("002-restart")]
    with sqlite3.connect(case / ".killdrill" / "ledger.sqlite") as db:
        rows = db.execute(
            "select key, outcome, effect_id, context from killdrill_calls where provider = 'payments'"
        ).fetchall()
    charges = [{"key": k, "outcome": o, "effect": e, "context": json.loads(c or "{}")} for k, o, e, c in rows]
    return out.returncode, out.stdout + out.stderr, charges


@pytest.mark.parametrize(
    ("bug", "delay"),
    [  # per push, the server down past the activity's timeout under an unkeyed worker
        pytest.param(False, "3", marks=pytest.mark.slow),
        (True, "3"),
        pytest.param(True, "0", marks=pytest.mark.slow),
    ],
    ids=["keyed-down-3s", "unkeyed-down-3s", "unkeyed-down-briefly"],
)
def test_the_temporal_server_restarted_while_an_activity_runs(tmp_path: Path, bug: bool, delay: str) -> None:
    rc, text, charges = _drill(tmp_path, "--restart-delay", delay, bug=bug)
    created = [c for c in charges if c["outcome"] == "created"]
    assert re.search(
        r"the temporal integration's service killed when during:payments\.charge was reached;"
        r" the Temporal dev server \(pid \d+, then \d+\) on 127\.0\.0\.1:\d+, its database kept,"
        r" answering again \d+ ms after",
        text,
    ), text
    assert f"(worker) fault {FAULT}: drained" in text, text  # the trigger's process was not killed
    assert f"temporal killed and restarted here ({FAULT})" in text, text
    assert "(driver) ran free: exited rc 0" in text, text  # the workflow's history survived the restart
    if len(charges) > 1:  # down past the start-to-close, the server ran the activity again (unless
        # the worker's completion reached the restarted server before its timer fired: a race the
        # server settles, not the drill; the verdict below must match whichever way it went)
        assert [c["context"]["attempt"] for c in charges] == [1, 2], charges
    if not bug:
        assert rc == 0, text
        assert [c["outcome"] for c in charges] == ["created", "replayed"], charges
        return
    assert (rc == 1) == (len(created) > 1), (text, charges)  # caught if and only if it charged twice
    if len(created) > 1:
        assert "duplicate_effect: payments.charge" in text, text
        assert "then its dependency temporal was restarted under it" in text, text
    else:
        assert "payments 1 exactly-once" in text, text
