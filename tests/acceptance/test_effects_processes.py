"""The durable-effects toolkit across real processes: two spawned claimers race for one key (on
SQLite and PostgreSQL), and the example agent runs by hand.

Its own module (not tests/unit/effects/test_effects.py) because each spawned claimer imports the module
of its target: this one imports only what the claimers need.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from killdrill.effects import RacyResultStore, ResultStore

# --------------------------------------------------------------------------- real races


def _race_worker(url: str, key: str, barrier_dir: str, racy: bool, out: Any) -> None:
    """Claim ``key``; the racy store waits in its window until both workers are there."""
    me = Path(barrier_dir) / f"{os.getpid()}"

    def window() -> None:
        me.touch()
        deadline = time.monotonic() + 10
        while len(list(Path(barrier_dir).iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)

    store = RacyResultStore(url, on_window=window) if racy else ResultStore(url)
    if not racy:
        window()  # line both workers up right before the claim
    c = store.claim(key, thread="t", node="n", occurrence=0)
    if c.state == "claimed":
        store.complete(key, {"by": os.getpid()})
    out.put(c.state)
    store.close()


def _race(url: str, tmp_path: Path, *, racy: bool) -> list[str]:
    ResultStore(url).close()  # tables exist before the race
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    key = f"race-{uuid.uuid4().hex[:8]}"
    bar = tmp_path / f"bar-{key}"
    bar.mkdir()
    procs = [ctx.Process(target=_race_worker, args=(url, key, str(bar), racy, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return sorted(out.get(timeout=5) for _ in procs)


def test_atomic_claim_has_one_winner_across_processes(store_url: str, tmp_path: Path) -> None:
    for _ in range(3):
        states = _race(store_url, tmp_path, racy=False)
        assert states.count("claimed") == 1, states


def test_planted_read_then_insert_claim_lets_both_win(store_url: str, tmp_path: Path) -> None:
    states = _race(store_url, tmp_path, racy=True)
    assert states == ["claimed", "claimed"]
    assert isinstance(ResultStore(store_url, claim_strategy="read_then_insert"), RacyResultStore)


# --------------------------------------------------------------------------- the example agent


def _settle(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KILLDRILL_LEDGER": str(tmp_path / "ledger.sqlite"),
        "KILLDRILL_THREAD": "smoke",
    }
    env.pop("KILLDRILL_CONTROL", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "killdrill.examples.settlement",
            "--thread",
            "smoke",
            "--db",
            str(tmp_path / "c.sqlite"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )


def _ledger_calls(tmp_path: Path) -> list[tuple[str, str, str]]:
    from killdrill.fakes import connect

    fakes = connect(str(tmp_path / "ledger.sqlite"), thread="smoke")
    return [(c.provider, c.op, c.outcome) for c in fakes.ledger.calls()]


def test_example_runs_to_completion_and_a_second_run_redoes_nothing(tmp_path: Path) -> None:
    first = _settle(tmp_path)
    assert first.returncode == 0, first.stderr
    calls = _ledger_calls(tmp_path)
    assert sorted(calls) == sorted(
        [
            ("payments", "charge", "created"),
            ("kv", "set", "created"),
            ("counter", "increment", "created"),
            ("mailbox", "send", "created"),
        ]
    )
    second = _settle(tmp_path)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == json.loads(first.stdout)
    assert _ledger_calls(tmp_path) == calls  # not even a replayed call: nothing re-ran
