"""A drill test's cases run at once inside one pytest process (``workers=N``), each item still its own.

Real inner pytest runs (pytester) of ``tests/agents/plugin/overlap.py``, whose processes log
when they start and whether another case's first attempt was running beside theirs ("met"):
without ``workers`` no case ever meets another.  What must hold under the concurrent mode: each
item reports its own case (verdict, reproduction lines, JUnit properties), an item whose test
asks for another case gets that one, a case ``-k`` or ``--lf`` deselected never starts, and
``-x`` stops the cases not yet started.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# In-process inner runs drop the modules they imported when they end; SQLAlchemy's compiled
# parts cannot be imported twice in one process, so the harness side is imported here, once.
import killdrill.drill
import killdrill.ledger
import killdrill.report.drill
import killdrill.verdict  # noqa: F401

OVERLAP = str(Path(__file__).parents[1] / "agents" / "plugin" / "overlap.py")
INI = "[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\n"
POINTS = ["before:charge", "during:payments.charge", "after:charge", "before:report", "after:report"]


def agent(log: Path, *extra: str) -> list[str]:
    cmd = ["python", OVERLAP, "--thread", "{thread}", "--state", "{workdir}/state.json"]
    return [*cmd, "--log", str(log), *extra]


def started(log: Path) -> list[str]:
    """The schedules whose cases started (their workdirs are named after them), once each, in order."""
    lines = log.read_text().splitlines() if log.exists() else []
    # a case may run a second time on its own thread (its workdir NNN-own-thread-SCHEDULE)
    found = [m.group(1) for x in lines if (m := re.match(r"start \d+-(?:own-thread-)?(\S+) 1$", x))]
    return list(dict.fromkeys(found))


def met(log: Path) -> int:
    return sum(x.startswith("met ") for x in log.read_text().splitlines())


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def test_cases_run_at_once_each_item_reports_its_own(inner: pytest.Pytester) -> None:
    log, rendezvous = inner.path / "log.txt", inner.path / "meet"
    rendezvous.mkdir()
    cmd = agent(log, "--meet", str(rendezvous), "--naive")
    inner.makepyfile(
        test_at_once=f"""
        import pytest
        AGENT = {cmd!r}

        @pytest.mark.killdrill(points={POINTS!r})
        def test_charge(killdrill, kill_point):
            # one item asks for another case than the one started for it: it gets its own
            agent = AGENT[:-1] if kill_point == "after:charge" else AGENT  # without --naive
            killdrill.run(agent, kill_point).assert_exactly_once()
        """
    )
    res = inner.runpytest("--killdrill-workers=2", "-v", "--junitxml=junit.xml")
    res.assert_outcomes(passed=4, failed=1)
    out = res.stdout.str()
    assert "a drill test's cases run at once" in out  # the header says so
    assert met(log) >= 2, log.read_text()  # two cases' first attempts waited side by side
    # each item its own verdict, in its own report, with its own reproduction lines
    failing = "during:payments.charge"
    assert f"test_at_once.py::test_charge[{failing}] FAILED" in out
    assert f"pytest test_at_once.py::test_charge --killdrill-point={failing}" in out
    assert f"killdrill run --schedule {failing} " in out
    # after:charge, started with --naive (a duplicate charge), asked for its case without it
    for passing in ("before:charge", "after:charge", "before:report", "after:report"):
        assert f"test_at_once.py::test_charge[{passing}] PASSED" in out
    cases = {c.get("name"): c for c in ET.parse(inner.path / "junit.xml").iter("testcase")}
    for point in POINTS:
        props = {p.get("name"): p.get("value") for p in cases[f"test_charge[{point}]"].iter("property")}
        assert props["killdrill_schedule"] == point
        assert props["killdrill_verdict"] == ("violated" if point == failing else "exactly-once")
        assert point in props["killdrill_reproduce"]


def test_deselected_cases_never_start_k_and_lf(inner: pytest.Pytester) -> None:
    log = inner.path / "log.txt"
    inner.makepyfile(
        test_selected=f"""
        import pytest
        AGENT = {agent(log, "--naive")!r}

        @pytest.mark.killdrill(points={POINTS!r}, workers=2)
        def test_charge(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )
    res = inner.runpytest("-k", "before or payments", "-v")
    res.assert_outcomes(passed=2, failed=1, deselected=2)
    assert sorted(started(log)) == ["before_charge", "before_report", "during_payments.charge"]

    log.unlink()
    res = inner.runpytest("-v")  # every case, for --lf's record
    res.assert_outcomes(passed=3, failed=2)
    log.unlink()
    res = inner.runpytest("--lf", "-v")
    res.assert_outcomes(failed=2)
    assert sorted(started(log)) == ["after_charge", "during_payments.charge"], log.read_text()


def test_x_stops_the_cases_not_started(inner: pytest.Pytester) -> None:
    log = inner.path / "log.txt"
    points = [*POINTS, "before:charge,before:report", "after:charge,after:report"]
    points.append("before:report,after:report")
    inner.makepyfile(
        test_stop=f"""
        import pytest
        AGENT = {agent(log, "--fail-resume")!r}

        @pytest.mark.killdrill(points={points!r}, workers=2)
        def test_resume(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )
    res = inner.runpytest("-x", "-v")
    res.assert_outcomes(failed=1)
    assert "resume_failed" in res.stdout.str()
    # the first item's case and what the second worker had begun; never all eight
    assert 2 <= len(started(log)) < len(points), log.read_text()
