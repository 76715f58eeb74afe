"""killdrill chaos: seeded schedules, shards, planted bugs found and shrunk, clean runs, budgets.

Runs against the bundled settlement agent (about 1.2 s per attempt here), so run counts are
kept small: one seed per planted bug and 12 clean runs here; several seeds per bug and the
200-run clean check live in nightly/test_nightly_chaos.py.
"""

from __future__ import annotations

import json
import random
import shlex
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from killdrill.chaos.job import (
    VIOLATED,
    ChaosOptions,
    chaos_case,
    plan_schedule,
    run_chaos,
    shard_indices,
    update_corpus,
)
from killdrill.chaos.strategies import intervals, schedules
from killdrill.drill import Drill, DrillOptions
from killdrill.drill.intervals import START, resolve_schedule, strata
from killdrill.examples import SETTLEMENT
from killdrill.points import Fault, ScheduleError, occurrence_label, parse_fault, parse_schedule
from killdrill.records import CatalogueEntry, Discovery, LedgerSnapshot

if TYPE_CHECKING:
    from tests.conftest import SharedDiscoveries

AGENT = list(SETTLEMENT)
# Attempts fork from a warm template (no interpreter start, no imports): what chaos proves here is
# about schedules, shards and shrinking, not spawning; the budget test below spawns (via the CLI).
OPTS = DrillOptions(timeout=30.0, launcher="fork", preload=(SETTLEMENT[2],))

# Where each planted bug must be caught, as the example documents it.
BUG_POINTS = {
    "uuid_key": {"during:payments.charge", "after:charge_customer"},
    "ungated_email": {"during:mailbox.send", "after:send_receipt"},
}


def _fake_discovery() -> Discovery:
    labels = ["before:a", "during:payments.charge", "after:a", "committed:a", "before:b", "after:b"]
    cat = tuple(CatalogueEntry(lb, lb.split("#")[0], 1, 100.0 + 3.0 * i) for i, lb in enumerate(labels))
    return Discovery(command=("agent",), catalogue=cat, baseline=LedgerSnapshot(), duration_ms=150.0)


@pytest.fixture(scope="module")
def discoveries(
    tmp_path_factory: pytest.TempPathFactory, shared_discovery: SharedDiscoveries
) -> dict[str, Discovery]:
    """One discovery per command for the whole session: discovery is two clean runs."""

    class Lazy(dict):  # type: ignore[type-arg]
        def __missing__(self, bug: str) -> Discovery:
            cmd = AGENT + (["--bug", bug] if bug else [])
            root = tmp_path_factory.mktemp(f"disc-{bug or 'ok'}")
            self[bug] = shared_discovery(Drill(cmd, OPTS, root=str(root))).discover()
            return self[bug]

    return Lazy()


def _no_agents_left() -> None:
    kids = [
        p for p in psutil.Process().children(recursive=True) if "killdrill.examples" in " ".join(p.cmdline())
    ]
    assert kids == [], f"agent processes left behind: {kids}"


# ---- schedules: pure and fast --------------------------------------------------------------
def _timed(d: Discovery, scale: float, shuffle: int | None = None) -> Discovery:
    """The same labels as ``d`` at other timings (and, with ``shuffle``, reached in another order)."""
    cat = [replace(e, t_ms=e.t_ms * scale + 7.0) for e in d.catalogue]
    if shuffle is not None:
        random.Random(shuffle).shuffle(cat)
    return replace(d, catalogue=tuple(cat), duration_ms=d.duration_ms * scale + 9.0)


def test_same_seed_same_schedule_text_whatever_the_timings() -> None:
    d = _fake_discovery()
    a = [str(plan_schedule(d, 7, i)) for i in range(200)]
    # A slower machine, and parallel branches reaching the same boundaries in another order.
    assert a == [str(plan_schedule(_timed(d, 3.7), 7, i)) for i in range(200)]
    assert a == [str(plan_schedule(_timed(d, 0.4, shuffle=1), 7, i)) for i in range(200)]
    assert a == [str(plan_schedule(d, 7, i)) for i in reversed(range(200))][::-1]  # order of asking
    assert a != [str(plan_schedule(d, 8, i)) for i in range(200)]
    assert {len(parse_schedule(s)) for s in a} == {1, 2, 3}
    for text in a:
        sched = parse_schedule(text)
        assert str(sched) == text  # round-trips through the grammar
        assert all(k.pct is not None and 0 <= k.pct < 100 and not k.is_named for k in sched)
    # Resolving against a discovery gives milliseconds inside the aimed interval; the text stays.
    lengths = {iv.label: iv.length_ms for iv in intervals(d)}
    for text in a[:50]:
        resolved = resolve_schedule(parse_schedule(text), d)
        assert str(resolved) == text
        for k in resolved:
            if k.point is None:
                assert 0 <= k.offset_ms <= d.catalogue[0].t_ms  # type: ignore[operator]
            else:
                assert 0 <= k.delay_ms <= lengths[occurrence_label(k.point, k.occurrence)]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "kill"),
    [
        ("after:x+37.5%", Fault(point="after:x", pct=37.5)),
        ("before:x#2+0%", Fault(point="before:x", occurrence=2, pct=0.0)),
        ("during:payments.charge+99.9999%", Fault(point="during:payments.charge", pct=99.9999)),
        ("start+12%", Fault(pct=12.0)),
    ],
)
def test_percentage_kills_parse_and_print_back(text: str, kill: Fault) -> None:
    assert parse_fault(text) == kill and str(kill) == text and not kill.is_named


@pytest.mark.parametrize(
    "bad", ["start+100%", "after:x+100%", "after:x+1.00001%", "after:x~5%", "start", "start+-1%", "offset:5%"]
)
def test_bad_percentages_are_one_line_errors(bad: str) -> None:
    with pytest.raises(ScheduleError) as err:
        parse_fault(bad)
    assert err.value.text == bad and "\n" not in str(err.value)


def test_every_interval_gets_a_kill_before_any_gets_a_second() -> None:
    d = _fake_discovery()
    every = strata(d)
    assert every[0] == START and len(every) == len(d.catalogue) + 1
    plans = [parse_schedule(str(plan_schedule(d, 3, i))) for i in range(10 * len(every))]

    def aimed(k: Fault) -> str:
        return START if k.point is None else occurrence_label(k.point, k.occurrence)

    for slot in range(3):  # first kills, second kills, third kills: each dealt round-robin
        dealt = [aimed(p.faults[slot]) for p in plans if len(p) > slot]
        for r in range(len(dealt) // len(every)):
            assert sorted(dealt[r * len(every) : (r + 1) * len(every)]) == sorted(every), (slot, r)
    first = Counter(aimed(p.faults[0]) for p in plans)
    assert set(first.values()) == {10}  # the start interval no more than any other


def test_shards_are_disjoint_and_cover_the_runs() -> None:
    parts = [list(shard_indices((k, 3), 100)) for k in (1, 2, 3)]
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(100)) and len(flat) == len(set(flat))
    assert list(shard_indices((2, 3), 7)) == [1, 4]
    # Each shard plans the same schedule for a run as the whole job does.
    d = _fake_discovery()
    whole = {i: str(plan_schedule(d, 9, i)) for i in range(30)}
    for k in (1, 2, 3):
        assert {i: str(plan_schedule(d, 9, i)) for i in shard_indices((k, 3), 30)}.items() <= whole.items()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_strategies_draw_valid_schedules(data: st.DataObject) -> None:
    d = _fake_discovery()
    sched = data.draw(schedules(d, max_kills=3))
    assert 1 <= len(sched) <= 3
    assert parse_schedule(str(sched)) == sched  # round-trips through the grammar
    for k in sched:
        assert k.point is None or k.point in {e.point for e in d.catalogue}


def test_corpus_is_stable_and_deduplicated(tmp_path: Path) -> None:
    from killdrill.chaos.job import Shrunk

    path = tmp_path / "corpus.json"
    f1 = Shrunk("during:payments.charge", ("key_changed", "duplicate_effect"), "offset:3ms", 0, "r", 1)
    f2 = Shrunk("after:b", ("duplicate_effect",), "after:b+1ms", 1, "r", 1)
    assert update_corpus(path, ["agent"], [f1, f2], 5) == 2
    first = path.read_text()
    assert update_corpus(path, ["agent"], [f2, f1], 6) == 0
    assert path.read_text() == first
    data = json.loads(first)
    assert data["version"] == 1
    assert [e["schedule"] for e in data["regressions"]] == ["after:b", "during:payments.charge"]
    assert set(data["regressions"][0]) == {"command", "schedule", "kinds", "seed", "found"}
    assert data["regressions"][1]["kinds"] == ["duplicate_effect", "key_changed"]


def test_usage_errors_exit_2() -> None:
    for bad in (["--kills", "3..1"], ["--shard", "3/2"], ["--budget", "soon"]):
        proc = subprocess.run(
            [sys.executable, "-m", "killdrill", "chaos", *bad, "--", *AGENT], capture_output=True, text=True
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and bad[0] in proc.stderr


# ---- against the real example agent ----------------------------------------------------------
def test_kill_that_never_lands_is_a_miss_not_a_failure(
    tmp_path: Path, discoveries: dict[str, Discovery], monkeypatch: pytest.MonkeyPatch
) -> None:
    import killdrill.chaos.case
    import killdrill.drill.case

    judged: list[int] = []
    for module in (killdrill.drill.case, killdrill.chaos.case):  # wherever a case may be diagnosed
        if hasattr(module, "diagnose"):
            orig = module.diagnose
            monkeypatch.setattr(module, "diagnose", lambda *a, _o=orig, **k: judged.append(1) or _o(*a, **k))
    drill = Drill(AGENT, OPTS, root=str(tmp_path))
    drill.use_discovery(discoveries[""])
    case = chaos_case(drill, "offset:60000ms")
    assert case.ok, case.text()
    assert any(n.startswith("kill missed:") for n in case.notes)
    assert len(judged) == 1  # judged once, by the drill: chaos does not judge it again


@pytest.mark.parametrize(("bug", "seed"), [("uuid_key", 1), ("ungated_email", 2)])
def test_planted_bug_found_and_shrunk_to_its_boundary(
    bug: str, seed: int, tmp_path: Path, discoveries: dict[str, Discovery]
) -> None:
    cmd = [*AGENT, "--bug", bug]
    corpus = tmp_path / "corpus.json"
    opts = ChaosOptions(
        seed=seed,
        runs=50,
        processes=1,
        max_failures=1,
        report_dir=str(tmp_path / "r"),
        regressions=str(corpus),
    )
    result = run_chaos(cmd, OPTS, opts, discovery=discoveries[bug], log=lambda s: None)
    first = min(r.index for r in result.runs if r.outcome == VIOLATED)
    print(f"{bug} seed {seed}: first catch at run {first}, {len(result.runs)} runs, {result.elapsed_s:.1f}s")
    assert first < 50
    assert result.exit_code() == 1
    assert result.failures, "the failure was not shrunk"
    shrunk = result.failures[0]
    assert shrunk.schedule in BUG_POINTS[bug], shrunk
    assert "duplicate_effect" in shrunk.kinds
    found = next(r for r in result.runs if r.index == shrunk.index)
    assert shrunk.kinds == found.kinds  # the same violation kinds as the random find
    entries = json.loads(corpus.read_text())["regressions"]
    assert [(e["schedule"], e["kinds"], e["command"]) for e in entries] == [
        (shrunk.schedule, list(shrunk.kinds), cmd)
    ]
    # The minimal schedule reproduces on its own, as the corpus replay will run it.
    drill = Drill(cmd, OPTS, root=str(tmp_path / "replay"))
    drill.use_discovery(discoveries[bug])
    assert set(drill.run_case(shrunk.schedule).kinds) >= set(shrunk.kinds)
    _no_agents_left()


def test_correct_example_clean_and_sharded_report_merges(
    tmp_path: Path, discoveries: dict[str, Discovery]
) -> None:
    """The correct agent over 12 random runs in two shards; `killdrill report --merge` joins them."""
    reports = []
    for k in (1, 2):
        opts = ChaosOptions(seed=11, runs=12, shard=(k, 2), processes=1, report_dir=str(tmp_path / f"s{k}"))
        result = run_chaos(AGENT, OPTS, opts, discovery=discoveries[""], log=lambda s: None)
        bad = [c.text() for c in result.cases if not c.ok]
        assert bad == [] and result.exit_code() == 0, "\n\n".join(bad)
        assert [r.index for r in result.runs] == list(range(k - 1, 12, 2))
        plans = [json.loads(x) for x in (tmp_path / f"s{k}" / "plans.jsonl").read_text().splitlines()]
        assert [p["schedule"] for p in plans] == [
            str(plan_schedule(discoveries[""], 11, p["index"])) for p in plans
        ]
        reports.append(str(tmp_path / f"s{k}" / "report.json"))
    landed = sum(len(r.landed) for r in result.runs)
    assert landed > 0
    merged = tmp_path / "merged.json"
    proc = subprocess.run(
        [sys.executable, "-m", "killdrill", "report", "--merge", *reports, "--json", str(merged)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(merged.read_text())
    assert [r["index"] for r in data["runs"]] == list(range(12))
    assert data["summary"]["runs"] == 12 and data["summary"]["runs_violated"] == 0
    assert "seed: 11" in proc.stdout
    overlap = subprocess.run(
        [sys.executable, "-m", "killdrill", "report", "--merge", reports[0], reports[0]],
        capture_output=True,
        text=True,
    )
    assert overlap.returncode == 2 and "overlap" in overlap.stderr
    _no_agents_left()


def test_budget_expiring_mid_run_ends_cleanly(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "killdrill",
            "chaos",
            "--budget",
            "1s",
            "--seed",
            "3",
            "--processes",
            "2",
            "--report",
            str(tmp_path / "r"),
            "--",
            *AGENT,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["chaos"]["stopped"] == "budget"
    # The runs in flight when it expired finished, and none started after: every run dealt has
    # its result, and each of the 2 processes ran back to back at most what fits in the budget
    # plus the one it was running.  (Not "at most 2 runs": on a fast machine a run takes ~0.5 s.)
    runs = [json.loads(line) for line in (tmp_path / "r" / "runs.jsonl").read_text().splitlines()]
    plans = (tmp_path / "r" / "plans.jsonl").read_text().splitlines()
    assert data["summary"]["runs"] == len(runs) == len(plans) >= 1
    shortest = min(r["run"]["seconds"] for r in runs)
    assert len(runs) <= 2 * (int(1.0 / shortest) + 1), [r["run"]["seconds"] for r in runs]
    assert "seed 3" in proc.stderr and "seed: 3" in proc.stdout  # printed at start and end
    header = json.loads((tmp_path / "r" / "chaos.json").read_text())
    assert header["seed"] == 3 and header["discovery"]["catalogue"]
    assert (tmp_path / "r" / "junit.xml").exists() and (tmp_path / "r" / "report.html").exists()
    assert time.monotonic() - start < 60
    _no_agents_left()


# ---- files shared between jobs, and files a killed job leaves behind ---------------------------
_UPDATER = """
import sys, time
from pathlib import Path
from killdrill.chaos.job import Shrunk, update_corpus
path, who, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
while not go.exists():
    time.sleep(0.001)
for i in range(n):
    update_corpus(path, ["agent", who], [Shrunk(f"before:step{i}", ("duplicate_effect",), "x", i, "r", 1)], 1)
"""


def test_two_concurrent_jobs_lose_no_corpus_entry(tmp_path: Path) -> None:
    """Two real processes append 150 entries each to one corpus at the same time: 300 remain."""
    corpus, go = tmp_path / "corpus.json", tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _UPDATER, str(corpus), who, "150", str(go)], text=True)
        for who in ("a", "b")
    ]
    time.sleep(0.5)  # both started and waiting
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    entries = json.loads(corpus.read_text())["regressions"]
    assert len(entries) == 300
    assert {tuple(e["command"]) for e in entries} == {("agent", "a"), ("agent", "b")}


_REPORTER = """
import json, sys
from pathlib import Path
from killdrill.chaos.job import write_junit, write_reports
data = json.loads(open(sys.argv[1]).read())
write_reports(sys.argv[2], data)
while True:  # junit.xml is the slowest to write: the widest window for a kill
    write_junit(Path(sys.argv[2]) / "junit.xml", data)
"""


def _big_report() -> dict:
    from killdrill.chaos.job import RunRecord, report_dict
    from killdrill.records import CaseResult

    d = _fake_discovery()
    cases = [
        CaseResult(("agent",), f"before:a+{i / 10:g}%", f"t{i}", f"/w{i}", notes=("x" * 2000,), reproduce="r")
        for i in range(300)
    ]
    runs = [RunRecord(i, c.schedule, "clean", (), ("before:a",), 0, 0.1, "r") for i, c in enumerate(cases)]
    return report_dict({"seed": 1, "shard": "1/1", "command": ["agent"]}, d, runs, cases, [])


def test_reports_of_a_killed_job_are_whole(tmp_path: Path) -> None:
    """SIGKILL a process that rewrites report.json / junit.xml / report.html in a loop: each file
    is always the old or the new one, never empty or cut short."""
    from xml.etree import ElementTree as ET

    src = tmp_path / "data.json"
    src.write_text(json.dumps(_big_report()))
    out = tmp_path / "out"
    rng = random.Random(2)
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", _REPORTER, str(src), str(out)])
        deadline = time.monotonic() + 60
        while not (out / "junit.xml").exists() and time.monotonic() < deadline:  # first round only
            time.sleep(0.01)
        time.sleep(0.3 + rng.random() * 0.6)  # into the rewrite loop, at a random moment
        proc.kill()
        proc.wait()
        assert ET.parse(out / "junit.xml").getroot().find("testsuite").get("tests") == "300"  # type: ignore[union-attr]
        assert len(json.loads((out / "report.json").read_text())["runs"]) == 300
        assert (out / "report.html").read_text().rstrip().endswith("</html>")


def test_check_options_apply_to_chaos_cases(tmp_path: Path) -> None:
    """A saga that undoes its steps in the wrong order lands every effect once: only
    ``--check compensation_order`` sees it, and it must see it in chaos cases too (here a
    kill that misses, judged as the run it left)."""
    agents = Path(__file__).resolve().parents[1] / "detection" / "agents"
    cmd = [
        sys.executable,
        str(agents / "compensation_wrong_order.py"),
        "--thread",
        "{thread}",
        "--workdir",
        "{workdir}",
    ]
    plain = Drill(cmd, DrillOptions(timeout=30.0, root=str(tmp_path / "plain")))
    checked = Drill(cmd, DrillOptions(timeout=30.0, checks=("compensation_order",), root=str(tmp_path / "c")))
    checked.use_discovery(plain.discover())
    missed = "start+0%,offset:600000ms"  # the second kill runs past the end: a miss
    assert chaos_case(plain, missed).ok
    case = chaos_case(checked, missed)
    assert "compensation_order" in case.kinds, case.text()
    assert any(n.startswith("kill missed:") for n in case.notes)
    # and in a case whose kills land, on a percentage kill
    assert "compensation_order" in chaos_case(checked, "start+50%").kinds


def test_same_seed_same_schedules_across_jobs_shards_and_processes(tmp_path: Path) -> None:
    """Three real jobs, each with its own discovery (its own timings): one process, and two shards
    on two worker processes each.  The planned schedules are byte-identical, and every run's report carries
    the command that reproduces it."""
    steps = Path(__file__).resolve().parents[1] / "agents" / "basic" / "steps.py"
    agent = [sys.executable, str(steps), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]

    def job(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "killdrill", "chaos", "--runs", "4", "--seed", "5", "--no-shrink"]
        cmd += ["--report", str(tmp_path / name), "--launcher", "fork", *extra, "--", *agent]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    jobs = {"one": job("one", "--processes", "1")}
    jobs["s1"] = job("s1", "--processes", "2", "--shard", "1/2")
    jobs["s2"] = job("s2", "--workers", "2", "--shard", "2/2")  # the former spelling still works
    for name, proc in jobs.items():
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
    assert "--workers is now --processes" in jobs["s2"].stderr

    def plans(name: str) -> dict[int, str]:
        lines = (tmp_path / name / "plans.jsonl").read_text().splitlines()
        return {json.loads(x)["index"]: json.loads(x)["schedule"] for x in lines}

    one = plans("one")
    assert sorted(one) == list(range(4))
    assert {**plans("s1"), **plans("s2")} == one
    assert all("%" in s for s in one.values())  # timing-free text
    report = json.loads((tmp_path / "one" / "report.json").read_text())
    for run in report["runs"]:
        assert run["reproduce"].startswith(f"killdrill run --schedule {shlex.quote(run['schedule'])} ")
        assert run["reproduce"] in jobs["one"].stdout  # printed for every run
    junit = (tmp_path / "one" / "junit.xml").read_text()
    assert junit.count("reproduce: killdrill run --schedule") == 4
