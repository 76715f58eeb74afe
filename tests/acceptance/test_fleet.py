"""Fleet faults on real processes: the zombie worker (``pause:``) and the upgrade (``resume_with``).

The agents are in tests/agents/fleet: ``reserve.py`` reserves stock under a lease (``--fenced``
adds the fencing token, checked by the fake), ``checkout_v1.py`` is upgraded to
``checkout_v2_renamed.py`` (unsafe: a renamed node changes its key) or ``checkout_v2_safe.py``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from killdrill.chaos.job import ChaosOptions, run_chaos
from killdrill.chaos.options import parse_faults
from killdrill.drill import Drill, DrillOptions
from killdrill.effects import FencedStore, LeaseLost
from killdrill.errors import UsageError
from killdrill.fakes import StaleFence, connect
from killdrill.faults import fleet
from killdrill.points import Schedule, ScheduleError, parse_fault, parse_schedule
from killdrill.records import EXITED
from tests.cli_support import run_cli

AGENTS = Path(__file__).parents[1] / "agents" / "fleet"
REPEATS = 20


def reserve(fenced: bool) -> list[str]:
    cmd = [
        sys.executable,
        str(AGENTS / "reserve.py"),
        "--thread",
        "{thread}",
        "--db",
        "{workdir}/leases.sqlite",
    ]
    return [*cmd, "--fenced"] if fenced else cmd


def checkout(version: str) -> list[str]:
    return [
        sys.executable,
        str(AGENTS / f"checkout_{version}.py"),
        "--thread",
        "{thread}",
        "--db",
        "{workdir}/c.json",
    ]


def options(tmp_path: Path, **kw: object) -> DrillOptions:
    return DrillOptions(root=tmp_path, discovery_runs=1, launcher="fork", **kw)  # type: ignore[arg-type]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ---- grammar --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ["pause:after:effects.lease", "pause:during:payments.charge#2", "pause:after:x@before:y#3"],
)
def test_pause_parses_and_prints_back(text: str) -> None:
    kill = parse_fault(text)
    assert kill.pause and not kill.is_kill and not kill.is_named
    assert str(kill) == text and parse_fault(str(kill)) == kill


@pytest.mark.parametrize("text", ["pause:x", "pause:after:x+3ms", "pause:after:x~1s", "pause:after:x@y"])
def test_bad_pause_is_a_schedule_error(text: str) -> None:
    with pytest.raises(ScheduleError, match="pause:KIND:NAME"):
        parse_fault(text)


def test_a_resumer_cannot_be_paused_itself() -> None:
    with pytest.raises(ScheduleError, match="cannot be paused itself"):
        fleet.check_schedule(parse_schedule("pause:after:a,pause:after:b"))
    fleet.check_schedule(parse_schedule("pause:after:a,during:x.y,pause:after:b"))


# ---- the fenced lease and the fakes' fence ----------------------------------------------------
def test_takeover_of_an_expired_lease_bumps_the_token_and_fences_the_old_holder(store_url: str) -> None:
    old, new = FencedStore(store_url, lease_s=0.2), FencedStore(store_url, lease_s=0.2)
    first = old.acquire("k")
    assert first.token == 1 and not first.done
    assert new.try_acquire("k") is None  # live: wait
    time.sleep(0.25)
    second = new.acquire("k", wait_s=1)
    assert (second.token, second.taken_over) == (2, True)
    with pytest.raises(LeaseLost):
        old.complete(first, {"id": 1})  # the store fences itself
    with pytest.raises(LeaseLost):
        old.renew(first)
    new.complete(second, {"id": 2})
    done = old.acquire("k")
    assert done.done and done.result == {"id": 2}


def test_the_fake_refuses_a_stale_token_and_says_who_wrote(tmp_path: Path) -> None:
    fakes = connect(tmp_path / "ledger.sqlite", thread="t")
    assert fakes.counter.fence("stock", 1) == 0
    fakes.counter.increment("stock", 3, fence=1)
    assert fakes.counter.fence("stock", 2) == 1  # token 1 wrote: the new holder adopts it
    with pytest.raises(StaleFence) as refused:
        fakes.counter.increment("stock", 3, fence=1)
    assert refused.value.status == 409
    assert fakes.counter.get("stock") == 3
    assert [c.outcome for c in fakes.counter.calls()] == ["created", "rejected"]
    fakes.payments.charge(idempotency_key="k", amount=1, fence=5)
    with pytest.raises(StaleFence):
        fakes.payments.charge(idempotency_key="k", amount=1, fence=4)
    assert fakes.payments.charge(idempotency_key="k", amount=1)["replayed"]  # no fence: Stripe's rules


# ---- the zombie -------------------------------------------------------------------------------
def test_zombie_without_fencing_is_caught_with_both_workers_recorded(tmp_path: Path) -> None:
    with Drill(reserve(fenced=False), options(tmp_path)) as drill:
        case = drill.run_case("pause:after:effects.lease")
    assert case.kinds == ("duplicate_effect",)
    zombie, resumer = case.attempts[:2]
    assert (zombie.number, resumer.number) == (1, 2)
    assert any("paused (SIGSTOP" in n and "continued when attempt 2 exited" in n for n in zombie.notes)
    assert case.ledger is not None
    writes = [c for c in case.ledger.calls if c.op == "increment" and c.outcome == "created"]
    assert sorted(c.attempt for c in writes) == [1, 2]
    assert len({c.pid for c in writes}) == 2
    assert all(_gone(c.pid) for c in case.ledger.calls)
    assert "--schedule pause:after:effects.lease" in case.reproduce


@pytest.mark.parametrize("fenced", [False, True])
def test_a_zombie_over_http_is_recorded_as_itself_not_as_the_attempt_started_last(
    tmp_path: Path, fenced: bool
) -> None:
    """Each attempt gets its own URL of the HTTP fakes: the zombie's late write is attempt 1's,
    landed twice without the fence, refused with it (and the correct agent passes)."""
    with Drill([*reserve(fenced=fenced), "--http"], options(tmp_path, http_fakes=True)) as drill:
        case = drill.run_case("pause:after:effects.lease")
    assert case.kinds == (() if fenced else ("duplicate_effect",)), case.text()
    assert case.ledger is not None
    writes = sorted((c.attempt, c.outcome) for c in case.ledger.calls if c.op == "increment")
    assert writes == ([(1, "rejected"), (2, "created")] if fenced else [(1, "created"), (2, "created")])


@pytest.mark.parametrize(
    "schedule",
    [
        "pause:after:effects.lease",
        "pause:during:counter.increment",
        "pause:after:effects.lease@during:counter.increment",
        "pause:after:effects.lease@after:confirm",
    ],
)
def test_zombie_with_lease_and_fencing_token_passes(tmp_path: Path, schedule: str) -> None:
    with Drill(reserve(fenced=True), options(tmp_path)) as drill:
        case = drill.run_case(schedule)
    assert case.ok, case.text()
    assert [(a.number, a.outcome, a.returncode) for a in case.attempts] == [(1, EXITED, 0), (2, EXITED, 0)]
    assert case.ledger is not None
    assert all(_gone(c.pid) for c in case.ledger.calls)


def test_zombie_woken_at_a_point_of_the_resumer_hands_over_in_order(tmp_path: Path) -> None:
    with Drill(reserve(fenced=True), options(tmp_path)) as drill:
        case = drill.run_case("pause:after:effects.lease@during:counter.increment")
    zombie, resumer = case.attempts
    assert any("continued when attempt 2 reached during:counter.increment" in n for n in zombie.notes)
    assert any("held at during:counter.increment" in n for n in resumer.notes)
    assert case.ledger is not None
    calls = [(c.attempt, c.outcome) for c in case.ledger.calls if c.op == "increment"]
    assert calls == [(2, "created"), (1, "rejected")]  # the resumer wrote, the zombie was refused


def test_a_resumer_killed_by_the_schedule_wakes_the_zombie_and_a_third_attempt_finishes(
    tmp_path: Path,
) -> None:
    with Drill(reserve(fenced=True), options(tmp_path)) as drill:
        case = drill.run_case("pause:after:effects.lease,during:counter.increment")
    assert case.ok, case.text()
    assert [a.outcome for a in case.attempts[:2]] == [EXITED, "killed"]
    assert case.ledger is not None
    assert all(_gone(c.pid) for c in case.ledger.calls)


def test_a_pause_point_never_reached_is_point_not_reached(tmp_path: Path) -> None:
    with Drill(reserve(fenced=True), options(tmp_path)) as drill:
        case = drill.run_case("pause:after:confirm#2", check=False)
    assert case.kinds == ("point_not_reached",)
    assert len(case.attempts) == 1


def test_a_hung_resumer_is_killed_by_the_timeout_and_the_paused_tree_with_it(tmp_path: Path) -> None:
    hang = [sys.executable, str(Path(__file__).parents[1] / "agents" / "basic" / "hang.py")]
    with Drill(reserve(fenced=True), options(tmp_path, timeout=4.0, resume_with=hang)) as drill:
        started = time.monotonic()
        case = drill.run_case("pause:after:effects.lease")
    assert time.monotonic() - started < 30
    assert "hang" in case.kinds
    assert case.ledger is not None
    assert all(_gone(c.pid) for c in case.ledger.calls)


def zombie_verdicts(tmp_path: Path, runs: int) -> dict[bool, set[tuple[str, ...]]]:
    schedule = "pause:after:effects.lease@during:counter.increment"
    verdicts = {}
    for fenced in (False, True):
        with Drill(reserve(fenced), options(tmp_path / str(fenced), workers=2)) as drill:
            result = drill.run_all([schedule] * runs)
        verdicts[fenced] = {c.kinds for c in result.cases}
    return verdicts


def test_zombie_verdicts_hold_over_a_few_runs(tmp_path: Path) -> None:
    """Twice per push (a repeat, not a single lucky run); 20 times under ``-m slow`` (below)."""
    assert zombie_verdicts(tmp_path, 2) == {False: {("duplicate_effect",)}, True: {()}}


@pytest.mark.slow
def test_zombie_and_upgrade_verdicts_hold_over_20_runs(tmp_path: Path) -> None:
    """20 runs of each example, identical verdicts (about 20 s for the zombies, 2 cores)."""
    assert zombie_verdicts(tmp_path / "zombie", REPEATS) == {False: {("duplicate_effect",)}, True: {()}}
    verdicts = {}
    for version in ("v2_renamed", "v2_safe"):
        opts = options(tmp_path / version, resume_with=checkout(version), workers=2)
        with Drill(checkout("v1"), opts) as drill:
            result = drill.run_all(["during:payments.charge"] * REPEATS)
        verdicts[version] = {tuple(sorted(c.kinds)) for c in result.cases}
    assert verdicts == {"v2_renamed": {("duplicate_effect", "key_changed")}, "v2_safe": {()}}


@pytest.mark.parametrize(("fenced", "kinds"), [(False, ("duplicate_effect",)), (True, ())])
def test_langgraph_zombie_caught_without_fencing_passes_with_it(
    tmp_path: Path, fenced: bool, kinds: tuple[str, ...]
) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    cmd = [
        sys.executable,
        str(AGENTS / "reserve_graph.py"),
        "--thread",
        "{thread}",
        "--db",
        "{workdir}/ckpt.sqlite",
    ]
    with Drill(
        [*cmd, *(["--fenced"] if fenced else [])], options(tmp_path, integrations=("langgraph",))
    ) as drill:
        case = drill.run_case("pause:after:effects.lease")
    assert case.kinds == kinds, case.text()
    assert case.ledger is not None
    assert all(_gone(c.pid) for c in case.ledger.calls)


# ---- the upgrade -----------------------------------------------------------------------------
@pytest.mark.parametrize("point", ["during:payments.charge", "committed:charge", "committed:send_receipt"])
def test_upgrade_that_renames_a_node_is_caught(tmp_path: Path, point: str) -> None:
    with Drill(checkout("v1"), options(tmp_path, resume_with=checkout("v2_renamed"))) as drill:
        case = drill.run_case(point)
    assert set(case.kinds) == {"duplicate_effect", "key_changed"}, case.text()
    assert any(n.startswith("upgrade: attempt(s) 2 ran") for n in case.notes)
    words = shlex.split(case.reproduce)
    assert words[words.index("--resume-with") + 1] == shlex.join(checkout("v2_renamed"))


def test_safe_upgrade_passes_every_point_and_the_old_version_is_the_baseline(tmp_path: Path) -> None:
    with Drill(checkout("v1"), options(tmp_path, resume_with=checkout("v2_safe"), workers=2)) as drill:
        result = drill.run_all()
        assert "before:charge" in drill.points()  # the catalogue is version 1's
    assert [c.kinds for c in result.cases] == [()] * len(result.cases)
    assert len(result.cases) == 8


def test_without_the_upgrade_version_1_alone_passes(tmp_path: Path) -> None:
    with Drill(checkout("v1"), options(tmp_path)) as drill:
        assert drill.run_case("committed:charge").ok


# ---- CLI, reproduction, chaos ----------------------------------------------------------------
def test_cli_runs_a_pause_with_an_upgrade_and_its_reproduce_line_reproduces(tmp_path: Path) -> None:
    args = ["run", "--schedule", "committed:charge", "--discovery-runs", "1", "--", *checkout("v1")]
    caught = run_cli(tmp_path, *args, "--resume-with", "--", *checkout("v2_renamed"))
    assert caught.returncode == 1, caught.stderr
    line = next(ln.strip() for ln in caught.stdout.splitlines() if ln.strip().startswith("killdrill run"))
    assert "--resume-with" in line

    again = run_cli(tmp_path, "run", "--discovery-runs", "1", *shlex.split(line)[2:])
    assert again.returncode == 1 and "key_changed" in again.stdout
    passed = run_cli(tmp_path, *args, "--resume-with", "--", *checkout("v2_safe"))
    assert passed.returncode == 0, passed.stdout
    flag_form = ["run", "--schedule", "committed:charge", "--discovery-runs", "1"]
    flag_form += ["--resume-with", shlex.join(checkout("v2_safe")), "--", *checkout("v1")]
    assert run_cli(tmp_path, *flag_form).returncode == 0
    zombie = run_cli(
        tmp_path,
        "run",
        "--schedule",
        "pause:after:effects.lease",
        "--discovery-runs",
        "1",
        "--",
        *reserve(False),
    )
    assert zombie.returncode == 1 and "duplicate_effect" in zombie.stdout


def test_cli_resume_with_needs_a_command(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "--schedule", "before:x", "--", "python", "a.py", "--resume-with", "--")
    assert done.returncode == 2 and "needs the new version's command" in done.stderr


def test_chaos_draws_pauses_only_when_asked_and_deterministically() -> None:
    labels = ["before:a", "after:a", "during:x.y"]
    base = parse_schedule("after:a+12%,during:x.y")
    drawn = [fleet.draw_faults(base, labels, 7, i, ("kill", "pause")) for i in range(40)]
    assert drawn == [fleet.draw_faults(base, labels, 7, i, ("kill", "pause")) for i in range(40)]
    pauses = [s for s in drawn if s.faults[0].pause]
    assert 8 <= len(pauses) <= 32 and any(s.faults[0].until for s in pauses)
    assert all(str(s.faults[0]).startswith("pause:after:a") for s in pauses)
    assert all(fleet.draw_faults(base, labels, 7, i, ("kill",)) == base for i in range(10))
    assert parse_faults("pause") == ("kill", "pause")
    with pytest.raises(UsageError, match="unknown fault"):
        parse_faults("kill,zombie")
    assert isinstance(drawn[0], Schedule)


def test_chaos_with_pauses_finds_the_zombie_and_shrinks_to_a_pause(tmp_path: Path) -> None:
    # Seed 25 draws pause:after:effects.lease for its first run (a function of the seed and the labels).
    chaos = ChaosOptions(
        seed=25, runs=2, faults=("kill", "pause"), shrink_runs=4, min_kills=1, max_kills=1, progress=False
    )
    result = run_chaos(reserve(fenced=False), options(tmp_path), chaos, log=lambda s: None)
    assert result.runs[0].schedule == "pause:after:effects.lease"
    assert [f.schedule for f in result.failures] == ["pause:after:effects.lease"]
    assert result.failures[0].kinds == ("duplicate_effect",)
    assert "--schedule pause:after:effects.lease" in result.failures[0].reproduce


def test_chaos_cli_upgrade_needs_resume_with(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "chaos", "--runs", "1", "--faults", "kill,upgrade", "--", *checkout("v1"))
    assert done.returncode == 2 and "--resume-with" in done.stderr


# ---- the README's lines, as written -------------------------------------------------------------
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_lines() -> list[tuple[str, int]]:
    """The Fleet faults section's killdrill commands (continuations joined), with the exit code
    their trailing comment promises (1 for a violation kind, 0 for exactly-once)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Fleet faults", 1)[1].split("\n## ", 1)[0]
    joined = section.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        if line.startswith("killdrill ") and "#" in line:
            command, _, promise = line.partition("  #")
            out.append((command.strip(), 0 if "exactly-once" in promise else 1))
    return out


def run_readme_line(command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    script = f"A=tests/agents/fleet\n{command}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=README.parent)


def test_readme_lists_the_four_examples() -> None:
    lines = readme_lines()
    assert [(c.split()[1], code) for c, code in lines] == [("run", 1), ("run", 0), ("drill", 1), ("drill", 0)]


@pytest.mark.parametrize("index", [0, 1])
def test_readme_zombie_lines_as_written(index: int) -> None:
    command, code = readme_lines()[index]
    done = run_readme_line(command)
    assert done.returncode == code, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("index", [2, 3])
def test_readme_upgrade_lines_as_written(index: int) -> None:
    command, code = readme_lines()[index]
    done = run_readme_line(command)
    assert done.returncode == code, done.stdout + done.stderr
    if code == 0:
        assert "8 cases: 8 exactly-once" in done.stdout


# ---- the pytest marker and fixture ----------------------------------------------------------------
def test_pytest_marker_and_keyword_take_resume_with_and_pauses(pytester: pytest.Pytester) -> None:
    # forked attempts (the agents import the fakes: seconds of interpreter starts saved); the CLI
    # test above spawns them, pauses and upgrades included
    pytester.makeini(
        "[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\nkilldrill_launcher = fork\n"
    )
    pytester.makepyfile(
        test_inner_fleet=f"""
        import pytest
        V1, RENAMED, SAFE = {checkout("v1")!r}, {checkout("v2_renamed")!r}, {checkout("v2_safe")!r}
        RESERVE = {reserve(False)!r}

        @pytest.mark.killdrill(points=["committed:charge"], resume_with=RENAMED)
        def test_unsafe_upgrade(killdrill, kill_point):
            result = killdrill.run(V1, kill_point)
            assert set(result.kinds) == {{"duplicate_effect", "key_changed"}}
            assert "--resume-with" in result.reproduce

        @pytest.mark.killdrill(points=["committed:charge"])
        def test_safe_upgrade(killdrill, kill_point):
            killdrill.run(V1, kill_point, resume_with=SAFE).assert_exactly_once()

        @pytest.mark.killdrill(points=["pause:after:effects.lease"])
        def test_zombie(killdrill, kill_point):
            killdrill.run(RESERVE + ["--fenced"], kill_point).assert_exactly_once()
            assert killdrill.run(RESERVE, kill_point).kinds == ("duplicate_effect",)
        """
    )
    res = pytester.runpytest_subprocess("-p", "no:xdist", "-v")
    res.assert_outcomes(passed=3)
    assert "test_zombie[pause:after:effects.lease] PASSED" in res.stdout.str()


def test_the_generic_http_route_checks_fences_too(tmp_path: Path) -> None:
    from killdrill.fakes.http import FakesServer
    from tests.unit.fakes.test_http import request

    with FakesServer(str(tmp_path / "ledger.sqlite"), thread="t", attempt=1) as server:
        assert request(server, "POST", "/fakes/counter/increment", {"name": "n", "fence": 2})[0] == 200
        status, _, body = request(server, "POST", "/fakes/counter/increment", {"name": "n", "fence": 1})
    assert status == 409 and body["error"]["code"] == "stale_fence"
