"""Baselines a verdict can trust, on real processes, real kills and real ledgers:
thread-dependent work judged per thread, a wiped ledger never a pass, quiet re-entry notes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.drill.setup_checks import SetupWarning
from killdrill.records import (
    HARNESS_ERROR,
    PER_THREAD_BASELINE,
    SHARED_BASELINE,
    CatalogueEntry,
    Discovery,
    LedgerSnapshot,
)

AGENTS = Path(__file__).resolve().parents[1] / "detection" / "agents"


def _agent(name: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(AGENTS / f"{name}.py"),
        "--thread",
        "{thread}",
        "--workdir",
        "{workdir}",
        *extra,
    ]


def _two_contacts(thread: str) -> bool:
    """What thread_workload.py reads for a thread: a second contact on odd digests."""
    return bool(hashlib.sha256(thread.encode()).digest()[0] % 2)


def _uuids(*wanted: tuple[str, bool | None]) -> Iterator[uuid.UUID]:
    """uuid4 values whose thread names (``prefix`` + hex) have the wanted number of contacts:
    the harness names threads from uuid4, the agent reads its work from the thread."""
    for prefix, two in wanted:
        if two is None:  # a uuid the harness takes for something else (a ledger marker)
            yield uuid.uuid4()
            continue
        width = 10 if prefix == "kd-discovery-" else 12
        while True:
            u = uuid.uuid4()
            if _two_contacts(prefix + u.hex[:width]) == two:
                yield u
                break


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch):
    def choose(*wanted: tuple[str, bool | None]) -> None:
        real = uuid.uuid4
        picked = _uuids(*wanted)
        queue = [next(picked) for _ in wanted]
        monkeypatch.setattr(uuid, "uuid4", lambda: queue.pop(0) if queue else real())

    return choose


def test_thread_dependent_work_is_judged_per_thread(tmp_path: Path, threads) -> None:
    """Discovery's two threads do different work: every case runs under a clean run's thread."""
    threads(("kd-discovery-", True), ("kd-discovery-", False))
    drill = Drill(_agent("thread_workload"), DrillOptions(root=tmp_path, launcher="fork"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        discovery = drill.discover()
    # Fewer points under another thread is the thread's work, not state shared between runs.
    assert not [w for w in caught if issubclass(w.category, SetupWarning)], [str(w.message) for w in caught]
    assert discovery.mode == PER_THREAD_BASELINE, discovery.mode_reason
    assert "webhooks.post landed 2 vs 1 times" in discovery.mode_reason
    assert "during:webhooks.post#2" in discovery.labels()
    result = drill.run_all()
    assert result.ok, result.text()
    assert all(c.baseline.startswith(PER_THREAD_BASELINE) for c in result.cases)
    assert "Baseline mode: per-thread" in result.text()
    assert json.loads(json.dumps(result.to_dict()))["discovery"]["mode"] == PER_THREAD_BASELINE


def test_thread_dependence_discovery_missed_is_found_by_the_case(tmp_path: Path, threads) -> None:
    """Both discovery threads happen to do the same work; a case's thread does less: its own
    clean run judges it, and a point its thread never reaches is no violation of the agent."""
    # each case takes a uuid for its thread, then one for its ledger marker
    threads(("kd-discovery-", True), ("kd-discovery-", True), ("kd-", False), ("", None), ("kd-", False))
    drill = Drill(_agent("thread_workload"), DrillOptions(root=tmp_path, launcher="fork"))
    assert drill.discover().mode == SHARED_BASELINE
    fewer = drill.run_case("committed:notify_0")
    assert fewer.ok, fewer.text()
    assert fewer.baseline.startswith(PER_THREAD_BASELINE) and "extra clean run" in fewer.baseline
    unreachable = drill.run_case("during:webhooks.post#2")
    assert unreachable.ok, unreachable.text()
    assert any(n.startswith("not applicable") for n in unreachable.notes), unreachable.text()


def test_thread_dependent_bug_is_still_caught(tmp_path: Path, threads) -> None:
    threads(("kd-discovery-", True), ("kd-discovery-", False))
    drill = Drill(
        _agent("thread_workload", "--bug", "uuid_key"), DrillOptions(root=tmp_path, launcher="fork")
    )
    case = drill.run_case("during:webhooks.post#2")
    assert {"duplicate_effect", "key_changed"} <= set(case.kinds), case.text()


def test_a_wiped_ledger_is_never_a_pass(tmp_path: Path) -> None:
    """The agent deletes every SQLite file on restart, the ledger too: before, exit 0."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "killdrill",
            "run",
            "--root",
            str(tmp_path),
            "--schedule",
            "during:payments.charge",
            "--",
            *_agent("wipe_ledger", "--bug", "wipe_all"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a violated case, never exit 0
    assert HARNESS_ERROR in proc.stdout and "the ledger changed under the case" in proc.stdout
    # the correct agent tidies only its own scratch files and passes
    case = Drill(_agent("wipe_ledger"), DrillOptions(root=tmp_path / "ok")).run_case("during:payments.charge")
    assert case.ok, case.text()


def test_chaos_refuses_a_discovery_of_another_command(tmp_path: Path) -> None:
    other = Discovery(
        ("python", "other.py"), (CatalogueEntry("before:a", "before:a", 1, 1.0),), LedgerSnapshot()
    )
    saved = tmp_path / "discovery.json"
    saved.write_text(json.dumps(other.to_dict()))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "killdrill",
            "chaos",
            "--runs",
            "1",
            "--seed",
            "1",
            "--discovery",
            str(saved),
            "--",
            *_agent("restamp"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "another command" in ln]
    assert len(lines) == 1 and "python other.py" in lines[0], proc.stderr


def test_functional_api_reentry_is_not_resumed_from_start(tmp_path: Path) -> None:
    """The entrypoint runs again from its top on resume and its done tasks replay: no note."""
    pytest.importorskip("langgraph")
    drill = Drill(_agent("lg_functional"), DrillOptions(root=tmp_path, integrations=("langgraph",)))
    case = drill.run_case("committed:charge")
    assert case.ok, case.text()
    assert case.attempts[1].trace[0].point in ("before:checkpoint", "before:settle")
    assert not any(n.startswith("resumed_from_start") for n in case.notes), case.text()


@pytest.mark.parametrize("bug", [None, "uuid_key"])
def test_one_discovery_run_judges_thread_derived_values_against_the_case_thread(
    tmp_path: Path, bug: str | None
) -> None:
    """With one clean run, volatile fields cannot be learned: the settlement example's receipt ref
    (a hash of the thread) read as a lost and an unexpected email until the case's own thread
    became the yardstick. A key new per attempt is still caught against it."""
    from killdrill.examples import SETTLEMENT

    command = [*SETTLEMENT, *(("--bug", bug) if bug else ())]
    with Drill(command, DrillOptions(root=tmp_path, discovery_runs=1)) as d:
        case = d.run_case("during:payments.charge")
    if bug is None:
        assert case.ok, case.text()
        assert case.baseline.startswith(PER_THREAD_BASELINE), case.text()
    else:
        assert {"duplicate_effect", "key_changed"} <= set(case.kinds), case.text()


def test_a_thread_kept_outside_the_workdir_is_not_judged_by_a_run_that_found_it_done(tmp_path: Path) -> None:
    """The agent's runtime keeps each run by its thread in a server outside the workdir (a
    Temporal server the user runs): the clean run of the case's own thread, made after the case,
    finds that run closed and lands nothing.  The charge keyed by the runtime's attempt number is
    one duplicate named from the runtime context, with the receipt as its consequence, judged
    against the shared baseline (against the empty run, it would read as three unexplained
    strangers: unexpected_effect x2, key_changed "baseline 0")."""
    server = tmp_path / "server"
    server.mkdir()
    options = DrillOptions(root=tmp_path / "cases", launcher="fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SetupWarning)  # the server's folder is a fixed path: said
        with Drill(_agent("server_runtime", "--server", str(server), "--bug", "attempt_key"), options) as d:
            cases = [d.run_case("during:payments.charge"), d.run_case("after:charge")]
        with Drill(_agent("server_runtime", "--server", str(server)), options) as d:
            correct = [d.run_case("during:payments.charge"), d.run_case("after:charge")]
    for case in cases:
        assert case.kinds == ("duplicate_effect", "key_changed"), case.text()
        dup, changed = case.violations
        assert dup.cause == changed.cause == "key_new_per_attempt", case.text()
        [receipt] = [k for k in dup.consequences if k.kind == "unexpected_effect"]
        assert receipt.provider == "mailbox" and "ch_0002" in receipt.message, case.text()
        assert case.baseline.startswith(SHARED_BASELINE), case.text()
        assert any("found the thread's work already done" in n for n in case.notes), case.text()
    for case in correct:
        assert case.ok, case.text()
