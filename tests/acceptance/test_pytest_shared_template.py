"""The pytest plugin forks every test's attempts from one template per session.

A template per test would pay the agent's imports again in every test (LangGraph: seconds each).
These inner runs prove the sharing from outside, by the processes themselves: the fork
templates that are children of the harness while each test runs (``tests.leftovers``).  They
also prove what is not shared: each case's workdir is under its own test's ``tmp_path``, a test
with another environment gets its own template, and no template outlives its session (ended
normally, or by SIGINT).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# In-process inner runs drop the modules they imported when they end; SQLAlchemy's compiled
# parts cannot be imported twice in one process, so the harness side is imported here, once.
import killdrill.drill
import killdrill.ledger
import killdrill.report.drill
import killdrill.verdict  # noqa: F401
from tests import leftovers

AGENTS = Path(__file__).parents[1] / "agents" / "plugin"
STEPS = str(AGENTS / "steps.py")
INI = "[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\n"
REPO = str(Path(__file__).parents[2])


def _inner_file(out: Path) -> str:
    agent = ["python", STEPS, "--thread", "{thread}", "--state", "{workdir}/state.json"]
    return f"""
import json, os
import pytest
from tests.leftovers import templates

AGENT = {agent!r}

def record(name, killdrill, result):
    line = {{"test": name, "worker": os.environ.get("PYTEST_XDIST_WORKER", "-"), "harness": os.getpid(),
            "templates": templates(os.getpid()), "workdir": result.workdir, "root": str(killdrill.root)}}
    with open({str(out)!r}, "a") as f:
        f.write(json.dumps(line) + "\\n")

@pytest.mark.killdrill(points=["before:act", "after:plan", "before:report"], launcher="fork")
def test_drill(killdrill, kill_point):
    record(kill_point, killdrill, killdrill.run(AGENT, kill_point).assert_exactly_once())

@pytest.mark.killdrill(discover=AGENT, launcher="fork")
def test_discovered(killdrill, kill_point):
    record("discovered:" + kill_point, killdrill, killdrill.run(AGENT, kill_point).assert_exactly_once())

@pytest.mark.killdrill(points=["before:act"], launcher="fork", env={{"KD_OTHER_ENV": "1"}})
def test_other_env(killdrill, kill_point):
    record("other-env", killdrill, killdrill.run(AGENT, kill_point).assert_exactly_once())
"""


def _lines(out: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in out.read_text().splitlines()]


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.syspathinsert(REPO)  # the inner tests import tests.leftovers
    return pytester


def test_one_template_serves_every_test_and_is_gone_after_the_session(inner: pytest.Pytester) -> None:
    out = inner.path / "seen.jsonl"
    inner.makepyfile(test_shared=_inner_file(out))
    before = set(leftovers.templates(os.getpid()))  # the warden, if an earlier test started one
    res = inner.runpytest("-p", "no:randomly", "-p", "no:cacheprovider")
    lines = _lines(out)
    res.assert_outcomes(passed=len(lines))
    assert len(lines) > 3 + 1
    own = {str(x["test"]): set(x["templates"]) - before for x in lines}  # type: ignore[call-overload]
    shared = [own[t] for t in own if t != "other-env"]
    assert len(shared) == len(lines) - 1 and all(len(s) == 1 for s in shared), own
    assert all(s == shared[0] for s in shared), own  # one template pid served both marked tests
    assert len(own["other-env"]) == 2 and shared[0] < own["other-env"], own  # its env: its own template
    for x in lines:  # a case owns its workdir: under its own test's tmp_path, never a shared one
        assert str(x["workdir"]).startswith(str(x["root"]) + os.sep), x
    assert len({x["root"] for x in lines}) == len(lines)
    made = own["other-env"]
    assert leftovers.wait_gone(sorted(made), 10) < 10, "a template outlived its session"
    assert set(leftovers.templates(os.getpid())) <= before


def test_one_template_per_xdist_worker(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    out = inner.path / "seen.jsonl"
    inner.makepyfile(test_shared=_inner_file(out))
    res = inner.runpytest_subprocess("-n", "2", "-p", "no:randomly", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=len(_lines(out)))
    lines = [x for x in _lines(out) if x["test"] != "other-env"]
    by_worker: dict[str, set[int]] = {}
    for x in lines:
        by_worker.setdefault(str(x["worker"]), set()).update(x["templates"])  # type: ignore[arg-type]
    assert set(by_worker) <= {"gw0", "gw1"} and by_worker, by_worker
    for worker, pids in by_worker.items():  # the worker's warden never runs here: fork only
        assert len(pids) == 1, (worker, by_worker)
    every = sorted(set().union(*by_worker.values(), *(set(x["templates"]) for x in _lines(out))))
    assert leftovers.wait_gone(every, 10) < 10, "a worker's template outlived the session"


def test_an_interrupted_session_leaves_no_template(inner: pytest.Pytester) -> None:
    """SIGINT while a test's attempt runs: pytest's unconfigure closes the pool; the attempt,
    its keeper and the template are all gone."""
    out = inner.path / "seen.jsonl"
    agent = ["python", STEPS, "--thread", "{thread}", "--state", "{workdir}/state.json"]
    inner.makepyfile(
        test_slow=f"""
        import json, os, time
        import pytest
        from tests.leftovers import templates

        AGENT = {agent!r}

        @pytest.mark.killdrill(points=["before:act", "after:plan"], launcher="fork")
        def test_drill(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
            with open({str(out)!r}, "a") as f:
                f.write(json.dumps(templates(os.getpid())) + "\\n")
            time.sleep(60)  # interrupted here, with the session's template running
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-x"],
        cwd=inner.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = json.loads(out.read_text().splitlines()[0])
    assert len(pids) == 1, pids
    proc.send_signal(signal.SIGINT)
    text = proc.communicate(timeout=60)[0].decode()
    assert re.search(r"KeyboardInterrupt|Interrupted", text), text[-2000:]
    assert leftovers.wait_gone(pids, 10) < 10, "the template outlived the interrupted session"


def _discovered_only(inner: pytest.Pytester, name: str) -> None:
    """A test file ``name`` whose one test is parametrized by a discovery and runs nothing."""
    agent = ["python", STEPS, "--thread", "{thread}", "--state", "{workdir}/state.json"]
    inner.makepyfile(
        **{
            name: f"""
            import pytest

            @pytest.mark.killdrill(discover={agent!r}, launcher="fork")
            def test_discovered(killdrill, kill_point):
                pass
            """
        }
    )


def test_the_template_starts_at_collection_when_the_discovery_is_cached(inner: pytest.Pytester) -> None:
    """Under xdist a worker reads the discovery another worker made; its template must not wait
    for its first test (which would pay the agent's imports: -n 2 would be 2x the CLI).  A
    second session with the first's cache reads the discovery too: by the end of collection, with
    no test run, the command's template is running."""
    out = inner.path / "templates.json"
    _discovered_only(inner, "test_cached")
    before = set(leftovers.templates(os.getpid()))  # the warden, if an earlier test started one
    inner.makeconftest(
        f"""
        import json, os, time
        from tests.leftovers import templates

        def pytest_collection_finish(session):
            deadline = time.monotonic() + 30  # a template of this session's, not an earlier one
            while not set(templates(os.getpid())) - set({sorted(before)!r}) and time.monotonic() < deadline:
                time.sleep(0.1)
            with open({str(out)!r}, "w") as f:
                json.dump(templates(os.getpid()), f)
        """
    )
    first = inner.runpytest("-p", "no:randomly", "--collect-only", "-q")  # makes the discovery
    assert first.ret == 0, first.stdout.str()
    assert leftovers.wait_gone(sorted(set(json.loads(out.read_text())) - before), 10) < 10
    second = inner.runpytest("-p", "no:randomly", "--collect-only", "-q")  # reads it from the cache
    assert second.ret == 0, second.stdout.str()
    started = set(json.loads(out.read_text())) - before
    assert len(started) == 1, started
    assert leftovers.wait_gone(sorted(started), 10) < 10, "the prestarted template outlived its session"


def test_the_prestarted_template_makes_nothing_outside_basetemp(inner: pytest.Pytester) -> None:
    """The template started at collection is started by a drill with its own root: a folder under
    pytest's basetemp, like every other folder a session of the plugin makes (it was a ``mkdtemp``
    in the system's temporary folder)."""
    out = inner.path / "made.json"
    _discovered_only(inner, "test_made")
    before = set(leftovers.templates(os.getpid()))
    inner.makeconftest(
        f"""
        import json, os, tempfile, time
        from tests.leftovers import templates

        made = []
        _mkdtemp = tempfile.mkdtemp

        def mkdtemp(*args, **kwargs):
            path = _mkdtemp(*args, **kwargs)
            made.append(path)
            return path

        def pytest_configure(config):
            tempfile.mkdtemp = mkdtemp

        def pytest_collection_finish(session):
            deadline = time.monotonic() + 30  # this session's template: its folder was made before it
            while not set(templates(os.getpid())) - set({sorted(before)!r}) and time.monotonic() < deadline:
                time.sleep(0.1)
            basetemp = str(session.config._tmp_path_factory.getbasetemp())
            with open({str(out)!r}, "w") as f:
                json.dump({{"made": made, "basetemp": basetemp}}, f)

        def pytest_unconfigure(config):
            tempfile.mkdtemp = _mkdtemp
        """
    )
    res = inner.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--collect-only", "-q")
    assert res.ret == 0, res.stdout.str()
    seen = json.loads(out.read_text())
    outside = [p for p in seen["made"] if "killdrill-" in Path(p).name and not p.startswith(seen["basetemp"])]
    # but the runs' short temporary folder, when pytest's paths are too long for a socket under
    # them (killdrill.drill.workdirs.TMP_PATH_LIMIT): claimed, and gone with the session
    short = [p for p in outside if Path(p).name.startswith("killdrill-tmp-")]
    deadline = time.monotonic() + 10  # the session's drills close as its template stops
    while any(Path(p).exists() for p in short) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert outside == short and not any(Path(p).exists() for p in short), seen
    assert leftovers.wait_gone(sorted(set(leftovers.templates(os.getpid())) - before), 10) < 10
