"""Connection faults toward the HTTP fakes drill a client's own retry logic, on real processes.

``drop:payments.charge``: the provider commits the charge, the connection closes unanswered; a
client that retries with a stable key gets the stored charge replayed (passes), one that retries
without a key or with a new key per try charges twice (caught).  The real ``stripe`` SDK with
``max_network_retries`` reuses its automatic key on its own retries (passes); an agent that calls
``create`` again after ``APIConnectionError`` gets a new key per call (caught).
``reset:payments.charge``: the connection is reset before anything is processed, so every retry
is safe (no false alarm), and the ledger shows one charge.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions, UnknownPointError
from killdrill.points import Fault, ScheduleError, parse_fault, parse_schedule
from killdrill.records import CREATED, REPLAYED

AGENT = Path(__file__).parents[1] / "agents" / "basic" / "retrying_client.py"


def client(*args: str) -> list[str]:
    return [sys.executable, str(AGENT), "--thread", "{thread}", *args]


def drill(
    tmp_path: Path, command: list[str], schedules: list[str]
) -> list[tuple[tuple[str, ...], list[str], str]]:
    options = DrillOptions(
        root=tmp_path, http_fakes=True, launcher="fork", discovery_runs=1, workers=2, keep=True
    )
    with Drill(command, options) as d:
        result = d.run_all(schedules)
    out = []
    for case in result.cases:
        assert case.ledger is not None
        outcomes = [c.outcome for c in case.ledger.calls if (c.provider, c.op) == ("payments", "charge")]
        assert len(case.attempts) == 1 and case.attempts[0].returncode == 0, case.attempts
        out.append((case.kinds, outcomes, " ".join(case.attempts[0].notes)))
    return out


def test_grammar_parses_prints_and_refuses() -> None:
    drop = parse_fault("drop:payments.charge#2~1.5s")
    assert drop == Fault(point="during:payments.charge", occurrence=2, hold_ms=1500.0, fault="drop")
    assert str(drop) == "drop:payments.charge#2~1500ms" and parse_fault(str(drop)) == drop
    assert not drop.is_kill and not drop.at("during:payments.charge", 2)  # the fakes apply it, not a kill
    assert str(parse_schedule("reset:payments.charge,before:x")) == "reset:payments.charge,before:x"
    for bad, why in [
        ("reset:payments.charge~1s", "takes no hold"),
        ("drop:charge", "PROVIDER.OP"),
        ("drop:payments.charge#0", "count from 1"),
        ("dorp:payments.charge", "did you mean drop:payments.charge"),
    ]:
        with pytest.raises(ScheduleError, match=why):
            parse_fault(bad)


@pytest.mark.parametrize(
    ("args", "kinds", "outcomes"),
    [
        (["--key", "stable"], (), [CREATED, REPLAYED]),
        (["--key", "none"], ("duplicate_effect",), [CREATED, CREATED]),
        (["--key", "per-retry"], ("duplicate_effect", "key_changed"), [CREATED, CREATED]),
        (["--client", "stripe", "--key", "stable"], (), [CREATED, REPLAYED]),
        (
            ["--client", "stripe", "--key", "per-retry"],
            ("duplicate_effect", "key_changed"),
            [CREATED, CREATED],
        ),
    ],
    ids=[
        "requests-stable-key",
        "requests-no-key",
        "requests-key-per-retry",
        "stripe-sdk-retries",
        "stripe-new-call",
    ],
)
def test_dropped_answer_after_commit(
    tmp_path: Path, args: list[str], kinds: tuple[str, ...], outcomes: list[str]
) -> None:
    if "stripe" in args:
        pytest.importorskip("stripe")
    [(got, ledger, notes)] = drill(tmp_path, client(*args), ["drop:payments.charge"])
    assert ledger == outcomes  # by hand: the first try committed, the retry replayed or charged again
    assert got == kinds
    assert "dropped the response of payments.charge after the provider committed it" in notes


def test_held_then_dropped(tmp_path: Path) -> None:
    started = time.monotonic()
    [(kinds, ledger, notes)] = drill(tmp_path, client("--key", "stable"), ["drop:payments.charge~400ms"])
    assert (kinds, ledger) == ((), [CREATED, REPLAYED]) and "(held 0.4s)" in notes
    assert time.monotonic() - started > 0.4


@pytest.mark.parametrize("key", ["stable", "none"])
def test_reset_before_processing_commits_nothing(tmp_path: Path, key: str) -> None:
    [(kinds, ledger, notes)] = drill(tmp_path, client("--key", key), ["reset:payments.charge"])
    assert (kinds, ledger) == ((), [CREATED])  # the reset request never reached the provider
    assert "reset the connection of payments.charge before it was processed" in notes


def test_a_fault_on_an_op_the_client_never_calls_is_an_error(tmp_path: Path) -> None:
    options = DrillOptions(root=tmp_path, http_fakes=True, discovery_runs=1)
    with Drill(client("--key", "stable"), options) as d, pytest.raises(UnknownPointError, match="catalogue"):
        d.check_schedule(parse_schedule("drop:mailbox.send"))


def test_cli_exit_codes(tmp_path: Path) -> None:
    def run(key: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "killdrill", "run", "--http-fakes", "--discovery-runs", "1", "--root",
             str(tmp_path / key), "-s", "drop:payments.charge", "--", *client("--key", key)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    caught, passed = run("none"), run("stable")
    assert caught.returncode == 1 and "duplicate_effect" in caught.stdout, caught.stdout + caught.stderr
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_pytest_marker(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\n")
    pytester.makepyfile(
        test_inner=f"""
        import pytest

        @pytest.mark.killdrill(points=["drop:payments.charge", "reset:payments.charge"], http_fakes=True)
        @pytest.mark.parametrize("key", ["stable", "none"])
        def test_charge(killdrill, kill_point, key):
            killdrill.run({client()!r} + ["--key", key], kill_point).assert_exactly_once()
        """
    )
    res = pytester.runpytest_subprocess("-p", "no:xdist", "-rf")
    res.assert_outcomes(passed=3, failed=1)
    res.stdout.fnmatch_lines(["FAILED test_inner.py::test_charge?drop:payments.charge-none? - duplicate*"])


@pytest.mark.slow
def test_verdicts_identical_over_20_runs(tmp_path: Path) -> None:
    started = time.monotonic()
    caught = drill(tmp_path / "none", client("--key", "none"), ["drop:payments.charge"] * 20)
    passed = drill(tmp_path / "stable", client("--key", "stable"), ["drop:payments.charge"] * 20)
    print(f"20+20 runs in {time.monotonic() - started:.1f}s")
    assert [c[:2] for c in caught] == [(("duplicate_effect",), [CREATED, CREATED])] * 20
    assert [c[:2] for c in passed] == [((), [CREATED, REPLAYED])] * 20


def test_chaos_draws_connection_faults_when_asked(tmp_path: Path) -> None:
    def chaos(key: str, *extra: str) -> tuple[int, list[str]]:
        report = tmp_path / key / "-".join(extra or ("plain",))
        proc = subprocess.run(
            [sys.executable, "-W", "ignore", "-m", "killdrill", "chaos", "--http-fakes", "--launcher", "fork",
             "--discovery-runs", "1", "--runs", "6", "--seed", "3", "--workers", "1", "--no-shrink",
             "--report", str(report), *extra, "--", *client("--key", key)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        plans = [json.loads(line)["schedule"] for line in (report / "plans.jsonl").read_text().splitlines()]
        return proc.returncode, plans

    rc, plans = chaos("stable", "--faults", "kill,net")
    faulted = [p for p in plans if p.startswith(("drop:", "reset:"))]
    assert rc == 0 and faulted and {p.split(":")[0] for p in faulted} == {"drop", "reset"}, plans
    assert chaos("none", "--faults", "net")[0] == 1
    assert not any(p.startswith(("drop:", "reset:")) for p in chaos("stable")[1])  # only when asked


def test_a_case_served_over_http_leaves_no_ledger_open_in_the_harness(tmp_path: Path) -> None:
    """The HTTP fakes write a case's ledger through the harness's pooled connections; the case's
    read closes them with its own (before the read-only read, it closed them by sharing their
    pool): a chaos job of 10^4 runs must not hold 10^4 files, removed workdirs' included."""
    import psutil

    from killdrill.ledger import _ledger

    options = DrillOptions(root=tmp_path, http_fakes=True, discovery_runs=1)
    with Drill(client("--key", "stable"), options) as d:
        for point in ("during:payments.charge", "drop:payments.charge"):
            assert d.run_case(point).ok
        opened = [f.path for f in psutil.Process().open_files()]
        assert [p for p in opened if p.startswith(str(tmp_path))] == [], opened
        pooled = [url for url in _ledger._databases if str(tmp_path) in url]  # and no pool kept for it
        assert pooled == [], pooled
