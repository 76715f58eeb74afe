"""The pytest plugin, tested the way users meet it: real inner pytest runs (pytester).

The agents are in tests/agents/plugin: ``steps.py`` has no effects and starts fast (most
tests), ``tiny.py`` charges through the fakes, and ``--naive`` charges without a key, which is
what a failing drill must show.  Inner runs set ``killdrill_discovery_runs = 1`` to stay fast.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# In-process inner runs drop the modules they imported when they end; SQLAlchemy's compiled
# parts cannot be imported twice in one process, so the harness side is imported here, once.
import killdrill.drill
import killdrill.ledger
import killdrill.report.drill
import killdrill.verdict  # noqa: F401
from killdrill.pytest_plugin import _same_command, random_schedules
from killdrill.pytest_plugin._cache import agent_files, discovery_key
from killdrill.records import CatalogueEntry, Discovery, LedgerSnapshot

AGENTS = Path(__file__).parents[1] / "agents" / "plugin"
STEPS = str(AGENTS / "steps.py")
TINY = str(AGENTS / "tiny.py")
INI = "[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\n"


def steps_agent(log: Path | None = None, *extra: str) -> list[str]:
    cmd = ["python", STEPS, "--thread", "{thread}", "--state", "{workdir}/state.json", *extra]
    return [*cmd, "--log", str(log)] if log else cmd


def discoveries(log: Path) -> int:
    """Clean runs the agent logged (discovery threads are named kd-discovery-...)."""
    return (
        sum(line.startswith("kd-discovery") for line in log.read_text().splitlines()) if log.exists() else 0
    )


def passed_ids(text: str) -> set[str]:
    return set(re.findall(r"(\S+::\S+) PASSED", text))


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def test_points_parametrize_with_schedules_as_ids_json_and_keep(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_inner_points=f"""
        import pytest
        AGENT = {steps_agent()!r}

        @pytest.mark.killdrill(points=["before:plan", "after:act", "after:plan,before:report"])
        def test_drill(killdrill, kill_point):
            result = killdrill.run(AGENT, kill_point).assert_exactly_once()
            assert result.schedule == kill_point
        """
    )
    res = inner.runpytest("-v", "--killdrill-json=out", "--killdrill-keep")
    res.assert_outcomes(passed=3)
    assert passed_ids(res.stdout.str()) == {
        "test_inner_points.py::test_drill[before:plan]",
        "test_inner_points.py::test_drill[after:act]",
        "test_inner_points.py::test_drill[after:plan,before:report]",
    }
    files = sorted((inner.path / "out").glob("*.json"))
    assert len(files) == 3
    data = json.loads(files[0].read_text())
    case = data["cases"][0]
    assert case["verdict"] == "exactly-once" and data["summary"]["ok"] == 1
    # --killdrill-keep: the passing case's workdir is still there, under the test's tmp_path
    assert Path(case["workdir"], "state.json").exists()
    assert f"{os.sep}test_drill_" in case["workdir"]


def test_the_discovery_folder_goes_with_its_clean_runs(inner: pytest.Pytester) -> None:
    """The session's discovery folder is removed once the background remover has deleted its
    clean runs' workdirs (their ``.removing-*`` trash keeps it until then): no empty
    ``killdrill-discovery-*`` folder stays in the basetemp."""
    inner.makepyfile(
        test_disc=f"""
        import pytest
        AGENT = {steps_agent()!r}

        @pytest.mark.killdrill(discover=AGENT)
        def test_every_boundary(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )
    basetemp = inner.path / "basetemp"
    res = inner.runpytest(f"--basetemp={basetemp}", "-k", "before:plan")
    res.assert_outcomes(passed=1)
    assert not list(basetemp.glob("killdrill-discovery-*")), sorted(p.name for p in basetemp.iterdir())


def test_discovery_once_cached_and_rediscovered(inner: pytest.Pytester) -> None:
    log = inner.path / "agent.log"
    inner.makepyfile(
        test_disc=f"""
        import pytest
        AGENT = {steps_agent(log)!r}

        @pytest.mark.killdrill(discover=AGENT)
        def test_every_boundary(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()

        @pytest.mark.killdrill(discover=AGENT)
        def test_catalogue(killdrill):
            assert killdrill.points(AGENT) == [
                "before:plan", "after:plan", "before:act", "after:act", "before:report", "after:report"
            ]
        """
    )
    res = inner.runpytest("-v")
    res.assert_outcomes(passed=7)
    assert "test_disc.py::test_every_boundary[committed:act]" not in res.stdout.str()
    assert "test_disc.py::test_every_boundary[after:report] PASSED" in res.stdout.str()
    assert discoveries(log) == 1  # one command, two tests, one discovery
    res = inner.runpytest("-k", "before:plan")  # a new session: the cache answers at collection
    res.assert_outcomes(passed=1, deselected=6)
    assert discoveries(log) == 1
    res = inner.runpytest("-k", "before:plan", "--killdrill-rediscover")
    res.assert_outcomes(passed=1, deselected=6)
    assert discoveries(log) == 2


def test_failing_drill_message_reproduction_and_junit(inner: pytest.Pytester) -> None:
    agent = ["python", TINY, "--thread", "{thread}", "--state", "{workdir}/state.json", "--naive"]
    inner.makepyfile(
        test_fail=f"""
        import pytest
        AGENT = {agent!r}

        @pytest.mark.killdrill(points=["before:charge", "during:payments.charge"])
        def test_charge(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )
    res = inner.runpytest("--junitxml=junit.xml", "-rf")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    # the short summary names the violation, not the exception's module path
    res.stdout.fnmatch_lines(["FAILED test_fail.py::test_charge?during:payments.charge? - duplicate_effect*"])
    assert "killdrill.records" not in out.split("short test summary info")[1]
    assert "test_charge[during:payments.charge]" in out
    assert "duplicate_effect: payments.charge" in out
    assert "killdrill run --schedule during:payments.charge --timeout 30 --discovery-runs 1 -- python" in out
    assert "pytest test_fail.py::test_charge --killdrill-point=during:payments.charge" in out
    # the verdict, not killdrill's internals
    assert "records.py:" not in out and "drill.py:" not in out
    assert "killdrill.run(AGENT, kill_point).assert_exactly_once()" in out

    cases = {c.get("name"): c for c in ET.parse(inner.path / "junit.xml").iter("testcase")}
    props = {
        name: {p.get("name"): p.get("value") for p in case.iter("property")} for name, case in cases.items()
    }
    assert props["test_charge[during:payments.charge]"]["killdrill_kinds"] == "duplicate_effect"
    assert props["test_charge[during:payments.charge]"]["killdrill_verdict"] == "violated"
    assert props["test_charge[before:charge]"] == {
        "killdrill_schedule": "before:charge",
        "killdrill_verdict": "exactly-once",
        "killdrill_kinds": "",
        "killdrill_reproduce": props["test_charge[before:charge]"]["killdrill_reproduce"],
    }

    # the printed reproduction works, and so does a point the marker does not list
    res = inner.runpytest("test_fail.py::test_charge", "--killdrill-point=after:charge", "-v")
    res.assert_outcomes(failed=1)
    assert "test_fail.py::test_charge[after:charge] FAILED" in res.stdout.str()
    assert "duplicate_effect" in res.stdout.str()


def test_harness_errors_are_clear_test_errors(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_errors=f"""
        import pytest
        AGENT = {steps_agent()!r}

        @pytest.mark.killdrill(points=["before:nowhere"])
        def test_unknown_point(killdrill, kill_point):
            killdrill.run(AGENT, kill_point)

        def test_missing_command(killdrill):
            killdrill.run(["no-such-agent-kd4"], "before:plan")

        @pytest.mark.killdrill(discover=["python", "-c", "raise SystemExit(3)"])
        def test_discovery_fails(killdrill, kill_point):
            pass

        @pytest.mark.killdrill(point=["before:plan"])
        def test_bad_marker(killdrill, kill_point):
            pass

        def test_no_marker(kill_point):
            pass

        def test_resume_failed(killdrill):
            killdrill.run(AGENT + ["--fail-resume"], "after:act").assert_exactly_once()
        """
    )
    res = inner.runpytest("-rfE")
    res.assert_outcomes(failed=3, errors=3)
    out = res.stdout.str()
    assert "Traceback" not in out
    assert "During handling" not in out
    assert "drill.py:" not in out and "supervisor.py:" not in out and "_cache.py:" not in out
    res.stdout.fnmatch_lines(
        [
            "*killdrill harness error: bad kill point 'before:nowhere': not reached by a clean run; "
            "*the catalogue is: before:plan, after:plan, before:act*",
            "*killdrill harness error: command not found: no-such-agent-kd4*",
        ]
    )
    assert "ERROR at setup of test_discovery_fails[killdrill-error]" in out
    assert "killdrill discovery failed: the clean run of python -c 'raise SystemExit(3)' exited 3" in out
    assert "unknown argument point= (known:" in out
    assert "kill_point has no schedules: mark the test with @pytest.mark.killdrill" in out
    assert "resume_failed: the run never completed" in out
    assert "pytest test_errors.py::test_resume_failed" in out  # not a kill_point test: its node id

    res = inner.runpytest("--killdrill-point=sometime:soon")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--killdrill-point: bad kill point 'sometime:soon': unknown kind 'sometime'*"])


def test_random_schedules_are_seeded_and_printed(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_rand=f"""
        import pytest
        AGENT = {steps_agent()!r}

        @pytest.mark.killdrill(points=["before:plan"], command=AGENT)
        def test_drill(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )

    def collected(*args: str) -> tuple[list[str], str]:
        res = inner.runpytest("--collect-only", "--killdrill-random=4", *args)
        return re.findall(r"<Function (test_drill\[.*\])>", res.stdout.str()), res.stdout.str()

    first, out = collected("--killdrill-seed=7")
    assert "killdrill: --killdrill-seed=7 (--killdrill-random=4)" in out
    assert len(first) == 5 and first[0] == "test_drill[before:plan]"
    # same seed, same cases; and they pass on a correct agent: no false alarm from the kinds drawn
    res = inner.runpytest("-v", "--killdrill-random=4", "--killdrill-seed=7")
    res.assert_outcomes(passed=5)
    assert passed_ids(res.stdout.str()) == {f"test_rand.py::{i}" for i in first}
    _, out = collected()
    assert re.search(r"killdrill: --killdrill-seed=\d+ \(--killdrill-random=4\)", out)


def test_regression_corpus_replays_matching_command(inner: pytest.Pytester) -> None:
    agent = steps_agent()
    corpus = {  # the format killdrill chaos --regressions writes (killdrill.chaos.job.update_corpus)
        "version": 1,
        "regressions": [
            {
                "command": agent,
                "schedule": "after:act,before:report",
                "kinds": ["duplicate_effect"],
                "seed": 5,
            },
            {"command": [sys.executable, *agent[1:]], "schedule": "after:plan", "kinds": ["key_changed"]},
            {"command": ["python", "other.py"], "schedule": "before:act", "kinds": ["duplicate_effect"]},
            {"command": agent, "schedule": "before:plan", "kinds": ["missing_effect"]},
        ],
    }
    (inner.path / "corpus.json").write_text(json.dumps(corpus))
    inner.makepyfile(
        test_reg=f"""
        import pytest
        AGENT = {agent!r}

        @pytest.mark.killdrill(points=["before:plan"], command=AGENT)
        def test_drill(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()

        @pytest.mark.killdrill(points=["before:plan"])
        def test_no_command(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )
    res = inner.runpytest("-v", "-rs", "--killdrill-regressions=corpus.json")
    # a points= test learns its command when it runs: the corpus entries of other commands skip
    res.assert_outcomes(passed=6, skipped=1)
    assert passed_ids(res.stdout.str()) == {
        "test_reg.py::test_drill[before:plan]",
        "test_reg.py::test_drill[after:act,before:report]",
        "test_reg.py::test_drill[after:plan]",
        "test_reg.py::test_no_command[before:plan]",
        "test_reg.py::test_no_command[after:act,before:report]",
        "test_reg.py::test_no_command[after:plan]",
    }
    res.stdout.fnmatch_lines(
        ["SKIPPED*regression before:act was recorded for another command: python other.py*"]
    )
    assert "killdrill: 4 regression(s) from corpus.json" in res.stdout.str()
    (inner.path / "bad.json").write_text('{"regressions": [{"schedule": "before:plan"}]}')
    res = inner.runpytest("--killdrill-regressions=bad.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*entry 0 needs a command list and a schedule string*"])


def test_xdist_two_workers_same_results_one_discovery(inner: pytest.Pytester) -> None:
    log = inner.path / "agent.log"
    inner.makepyfile(
        test_x=f"""
        import os
        import pytest
        AGENT = {steps_agent(log)!r}

        @pytest.mark.killdrill(discover=AGENT)
        def test_every_boundary(killdrill, kill_point):
            result = killdrill.run(AGENT, kill_point).assert_exactly_once()
            assert result.workdir.startswith(str(killdrill.root))
        """
    )
    args = ("--killdrill-random=1", "--killdrill-seed=3")
    parallel = inner.runpytest_subprocess("-n", "2", "-v", *args)
    parallel.assert_outcomes(passed=7)
    assert discoveries(log) == 1  # both workers collected it; the lock let one of them run it
    serial = inner.runpytest("--collect-only", *args)  # the same cases, collected serially
    ids = {f"test_x.py::{i}" for i in re.findall(r"<Function (\S+)>", serial.stdout.str())}
    assert len(ids) == 7
    assert set(re.findall(r"PASSED (test_x.py::\S+)", parallel.stdout.str())) == ids


def test_strict_markers_hypothesis_and_disabling(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_eco=f"""
        import pytest
        from hypothesis import HealthCheck, given, settings, strategies as st
        AGENT = {steps_agent()!r}

        @pytest.mark.killdrill(points=["after:plan"], timeout=20)
        def test_marked(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()

        @settings(max_examples=2, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(point=st.sampled_from(["before:act", "after:report"]))
        def test_property(killdrill, point):
            killdrill.run(AGENT, point).assert_exactly_once()
        """
    )
    res = inner.runpytest("--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning")
    res.assert_outcomes(passed=2)
    res = inner.runpytest("-p", "no:killdrill", "-k", "marked")
    res.assert_outcomes(errors=1, deselected=1)
    res.stdout.fnmatch_lines(["*fixture 'killdrill' not found*"])


# ---- units: no inner run -----------------------------------------------------------------------


def _discovery(labels: list[str]) -> Discovery:
    entries = []
    for i, label in enumerate(labels):
        point, _, occ = label.partition("#")
        entries.append(CatalogueEntry(label, point, int(occ or 1), 10.0 * i))
    return Discovery(command=("agent",), catalogue=tuple(entries), baseline=LedgerSnapshot())


def test_random_schedules_only_draw_what_a_resume_reaches() -> None:
    labels = ["before:a", "after:a", "before:b", "before:b#2", "after:b"]
    disc = _discovery(labels)
    drawn = random_schedules(disc, 30, random.Random(5), exclude=["before:a"])
    assert drawn == random_schedules(disc, 30, random.Random(5), exclude=["before:a"])
    assert len(drawn) == len(set(drawn)) and "before:a" not in drawn
    last_t = 10.0 * (len(labels) - 1)
    for text in drawn:
        kills = text.split(",")
        assert len(kills) <= 2
        if len(kills) == 2:  # the second is a first occurrence later in the catalogue
            assert labels.index(kills[1]) > labels.index(kills[0]) and "#" not in kills[1]
        m = re.fullmatch(r"(.+)\+([\d.]+)ms", kills[0])
        if m:
            assert 0 < float(m[2]) <= (last_t - 10.0 * labels.index(m[1])) / 2
        else:
            assert kills[0] in labels
    assert {"," in t for t in drawn} == {True, False}
    assert any("+" in t for t in drawn)


def test_discovery_key_follows_the_agents_files(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    helper = tmp_path / "helper.py"
    agent.write_text("print(1)\n")
    helper.write_text("X = 1\n")
    cmd = ["python", "agent.py", "--thread", "{thread}"]
    key = discovery_key(cmd, {"cwd": str(tmp_path)})
    assert key == discovery_key(cmd, {"cwd": str(tmp_path), "timeout": 5.0})  # cases only
    assert key != discovery_key(cmd, {"cwd": str(tmp_path), "http_fakes": True})
    assert {Path(f[0]).name for f in agent_files(cmd, str(tmp_path))} == {"agent.py", "helper.py"}
    helper.write_text("X = 22\n")  # a sibling module changed: discover again
    assert discovery_key(cmd, {"cwd": str(tmp_path)}) != key
    pkg_files = {Path(f[0]).name for f in agent_files(["python", "-m", "killdrill.examples.settlement"])}
    assert {"settlement.py", "case.py", "__init__.py"} <= pkg_files  # killdrill/drill/case.py


def test_same_command_treats_python_names_alike() -> None:
    assert _same_command(["python", "a.py"], [sys.executable, "a.py"])
    assert _same_command(["python3", "a.py"], ["python", "a.py"])
    assert not _same_command(["python", "a.py"], ["python", "b.py"])


def test_option_mistakes_in_ini_and_marker_are_one_line(inner: pytest.Pytester) -> None:
    garbage = inner.path / "garbage.sqlite"
    garbage.write_bytes(b"not a database" * 100)
    inner.makepyfile(
        test_mistakes=f"""
        import pytest
        AGENT = {steps_agent()!r}

        @pytest.mark.killdrill(points=["before:plan"], max_attempts=0)
        def test_bad_marker_value(killdrill, kill_point):
            killdrill.run(AGENT, kill_point)

        def test_bad_call_keyword(killdrill):
            killdrill.run(AGENT, "before:plan", launcher="thread")

        def test_fork_preload_missing(killdrill):
            killdrill.run(AGENT, "before:plan", launcher="fork", preload=["no_such_module_kd"])

        @pytest.mark.killdrill(discover=AGENT, ledger_url="sqlite:///{garbage}")
        def test_not_a_ledger(killdrill, kill_point):
            pass
        """
    )
    res = inner.runpytest("-rfE")
    res.assert_outcomes(failed=2, errors=2)
    out = res.stdout.str()
    assert "Traceback" not in out and "drill.py:" not in out and "forks.py:" not in out
    assert "killdrill marker max_attempts=: expected a whole number >= 1, got 0" in out
    assert "killdrill option launcher=: expected one of spawn, fork, got 'thread'" in out
    assert "cannot preload no_such_module_kd: ModuleNotFoundError" in out
    assert f"killdrill discovery failed: ledger {garbage} is unusable: file is not a database" in out

    inner.makeini(INI + "killdrill_max_attempts = -1\n")
    res = inner.runpytest()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["*killdrill ini killdrill_max_attempts: expected a whole number >= 1, got '-1'"]
    )
    assert "Traceback" not in res.stderr.str()

    inner.makeini(INI)
    (inner.path / "file.txt").write_text("a file, not a folder")  # tests run as root: no read-only dir
    res = inner.runpytest(f"--killdrill-json={inner.path / 'file.txt' / 'reports'}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*killdrill --killdrill-json *: cannot write there: * is a file, not a folder"])


def test_every_option_has_an_ini_key(inner: pytest.Pytester) -> None:
    """The keys the plugin lacked before the option table: root, keep, workers, launcher, preload, checks."""
    root = inner.path / "drills"
    inner.makeini(
        INI
        + f"killdrill_root = {root}\nkilldrill_keep = true\nkilldrill_workers = 2\n"
        + "killdrill_launcher = fork\nkilldrill_preload = json\nkilldrill_checks = compensation_order\n"
    )
    inner.makepyfile(
        test_keys=f"""
        AGENT = {steps_agent()!r}

        def test_options(killdrill):
            options = killdrill.options()
            assert options["launcher"] == "fork" and options["preload"] == ("json",)
            assert options["checks"] == ("compensation_order",) and options["workers"] == 2
            assert options["keep"] is True
            killdrill.run(AGENT, "before:act").assert_exactly_once()
        """
    )
    res = inner.runpytest()
    res.assert_outcomes(passed=1)
    assert [p.name for p in root.iterdir()] == ["test_keys.py_test_options"]  # kept: killdrill_keep
