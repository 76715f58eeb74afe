"""A newcomer's silent setup mistakes get one line each, never a quiet pass or argparse's usage."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import killdrill
from killdrill.cli.commands import build_parser
from killdrill.drill.setup_checks import SetupWarning
from tests.cli_support import run_cli as cli

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
STEPS = ["python", str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]
LANGGRAPH = [
    "python",
    "-m",
    "killdrill.examples.settlement_langgraph",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
]


def warnings_of(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("killdrill: warning:")]


def test_version(tmp_path: Path) -> None:
    proc = cli(tmp_path, "--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"killdrill {killdrill.__version__}"


def test_forgotten_separator_says_where_the_command_goes(tmp_path: Path) -> None:
    proc = cli(tmp_path, "drill", "--timeout", "5", "python", "agent.py", "--thread", "t")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "usage:" not in proc.stderr
    assert "unrecognized arguments python agent.py --thread t: put the agent's command after --" in lines[0]


def test_usage_shows_the_command_after_the_separator() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("points", "run", "drill", "chaos"):
        assert sub.choices[name].format_usage() == f"usage: killdrill {name} [options] -- COMMAND...\n"


@pytest.mark.parametrize(
    ("schedule", "suggestion"),
    [("before:chrage", "did you mean before:charge?"), ("befor:charge", "did you mean before:charge?")],
)
def test_typo_in_a_point_gets_did_you_mean(tmp_path: Path, schedule: str, suggestion: str) -> None:
    proc = cli(tmp_path, "run", "-s", schedule, "--root", str(tmp_path / "r"), "--", *STEPS)
    assert proc.returncode == 2
    assert suggestion in proc.stderr.strip().splitlines()[0]


def test_command_without_placeholders_is_a_usage_error_naming_the_fixed_path(tmp_path: Path) -> None:
    """A fixed checkpoint path: the clean runs prove the sharing, so no case runs (exit 2, one line
    naming the file and the fix), after the warning that the command has no placeholder."""
    fixed = ["python", str(AGENTS / "steps.py"), "--thread", "same", "--ckpt", str(tmp_path / "c.json")]
    proc = cli(tmp_path, "points", "--root", str(tmp_path / "r"), "--", *fixed)
    assert proc.returncode == 2, proc.stderr
    assert any("the command has no {workdir} or {thread}" in w for w in warnings_of(proc)), proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("killdrill: error:")]
    assert f"a fixed path outside the workdir, {tmp_path / 'c.json'}" in error
    assert error.endswith("give each case its own: '{workdir}/c.json' (and --thread '{thread}')")


def test_a_fixed_thread_beside_workdir_is_a_warning(tmp_path: Path) -> None:
    """``--thread same`` with a checkpoint under ``{workdir}``: the cases stay isolated (exit 0), but
    the user hears that the thread is the same in every case and what to write instead."""
    fixed = ["python", str(AGENTS / "steps.py"), "--thread", "same", "--ckpt", "{workdir}/c.json"]
    proc = cli(tmp_path, "points", "--root", str(tmp_path / "r"), "--", *fixed)
    assert proc.returncode == 0, proc.stderr
    (line,) = warnings_of(proc)
    assert "--thread same is the same in every case" in line and line.endswith("use --thread '{thread}'")


SHARED_FOLDER = """
import os, sys
import killdrill
from killdrill.fakes import connect
thread, folder = sys.argv[2], sys.argv[4]
path = os.path.join(folder, thread + ".json")
if not os.path.exists(path):
    with killdrill.node("charge"):
        connect().payments.charge(idempotency_key=thread + ":charge", amount=1, account="acme")
    with open(path, "w") as f:
        f.write("{}")
"""


def test_a_fixed_folder_the_runs_write_is_named_even_when_they_agree(tmp_path: Path) -> None:
    """A store outside the workdir (a DBOS folder, a session database) keyed by thread: the clean runs
    agree, so it is no usage error, but the warning names the folder every case shares."""
    (tmp_path / "agent.py").write_text(SHARED_FOLDER)
    (tmp_path / "store").mkdir()
    cmd = ["python", "agent.py", "--thread", "{thread}", "--state", "store"]
    proc = cli(tmp_path, "points", "--root", str(tmp_path / "r"), "--", *cmd)
    assert proc.returncode == 0, proc.stderr
    (line,) = warnings_of(proc)
    assert (
        "the clean runs wrote store, a fixed path outside the workdir (it existed before the drill)" in line
    )
    assert line.endswith("give each case its own, '{workdir}/store'")


def test_command_with_placeholders_has_no_warning(tmp_path: Path) -> None:
    proc = cli(tmp_path, "points", "--root", str(tmp_path / "r"), "--", *STEPS)
    assert proc.returncode == 0 and warnings_of(proc) == [], proc.stderr


@pytest.mark.parametrize("launcher", ["spawn", "fork"])
def test_forgotten_langgraph_flag_is_named(tmp_path: Path, launcher: str) -> None:
    proc = cli(
        tmp_path,
        "points",
        "--discovery-runs",
        "1",
        "--launcher",
        launcher,
        "--root",
        str(tmp_path),
        "--",
        *LANGGRAPH,
    )
    assert proc.returncode == 0, proc.stderr
    assert any("imports langgraph" in w and "add --langgraph" in w for w in warnings_of(proc)), proc.stderr


def test_no_langgraph_warning_for_an_agent_without_it(tmp_path: Path) -> None:
    """The import watch only reports what the agent imported (steps.py never imports LangGraph)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        killdrill.discover(STEPS, root=tmp_path, discovery_runs=1)
    assert [str(w.message) for w in caught if issubclass(w.category, SetupWarning)] == []


def _terminated_drill(tmp_path: Path, *args: str, **env: str) -> str:
    """``killdrill points ARGS -- sleeper`` SIGTERMed once its agent runs: its stderr (exit 143 asserted)."""
    pids = tmp_path / "pids"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}, **env}
    agent = ["python", str(AGENTS / "sleeper.py"), str(pids)]
    harness = subprocess.Popen(
        [sys.executable, "-m", "killdrill", "points", *args, "--", *agent],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    harness.send_signal(signal.SIGTERM)
    _, err = harness.communicate(timeout=60)
    assert harness.returncode == 128 + signal.SIGTERM, err
    return err


def test_sigterm_of_a_drill_prints_a_line(tmp_path: Path) -> None:
    """A CI runner's SIGTERM (job cancelled) stops the drill with a line, not in silence; in a
    ``--root`` of the user's, the line names the workdirs it leaves there (no sweep removes them)."""
    err = _terminated_drill(tmp_path, "--root", str(tmp_path / "r"))
    assert "killdrill: terminated (SIGTERM); every agent process was killed" in err
    [left] = (tmp_path / "r").iterdir()
    assert f"; its workdirs are kept at {left}\n" in err, err


def test_an_interrupted_drill_names_the_folder_it_leaves(tmp_path: Path) -> None:
    """Without --root the drill makes its root in the temp dir: an interrupted drill says where its
    unfinished workdirs stay, and ``killdrill clean`` removes them."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    err = _terminated_drill(tmp_path, TMPDIR=str(tmp))
    [root] = [p for p in tmp.iterdir() if p.name.startswith("killdrill-") and "owners" not in p.name]
    assert f"; its workdirs are kept at {root} (killdrill clean removes them)" in err, err
    env = {**os.environ, "TMPDIR": str(tmp)}
    spare = subprocess.run(
        [sys.executable, "-m", "killdrill", "clean", "--keep-evidence"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "1 kept folder(s) of failed cases left" in spare.stdout and root.is_dir(), spare.stdout
    assert f"  {root} (" in spare.stdout, spare.stdout  # named, with its size
    clean = subprocess.run(
        [sys.executable, "-m", "killdrill", "clean"], env=env, capture_output=True, text=True, timeout=60
    )
    assert f"removed kept folder {root}" in clean.stdout and not root.exists(), clean.stdout


def test_setup_warnings_reach_pytests_warnings_summary(pytester: pytest.Pytester, tmp_path: Path) -> None:
    fixed = ["python", str(AGENTS / "steps.py"), "--thread", "same", "--ckpt", str(tmp_path / "c.json")]
    pytester.makeini("[pytest]\nkilldrill_timeout = 30\nkilldrill_discovery_runs = 1\n")
    pytester.makepyfile(
        test_fixed=f"""
        import pytest
        AGENT = {fixed!r}

        @pytest.mark.killdrill(points=["before:charge"])
        def test_drill(killdrill, kill_point):
            killdrill.run(AGENT, kill_point)
        """
    )
    res = pytester.runpytest_subprocess("-W", "always")
    res.stdout.fnmatch_lines(["*SetupWarning: the command has no {workdir} or {thread}*"])


PARSES_AT_IMPORT = """
import argparse
import psutil
import killdrill
from killdrill.fakes import connect
parser = argparse.ArgumentParser()
parser.add_argument("--thread", required=True)
args = parser.parse_args()
with killdrill.node("charge"):
    connect().payments.charge(idempotency_key=args.thread, amount=1, account="acme")
"""


def test_preloading_a_script_says_why_and_what_to_preload_and_leaves_no_folder(tmp_path: Path) -> None:
    (tmp_path / "billing.py").write_text(PARSES_AT_IMPORT)
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env["TMPDIR"] = str(tmp_path / "tmp")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "killdrill",
            "drill",
            "--launcher",
            "fork",
            "--preload",
            "billing",
            "--",
            "python",
            "billing.py",
            "--thread",
            "{thread}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot preload billing: SystemExit: 2: importing billing ran it as a script" in line
    assert line.endswith("preload the libraries it imports instead: --preload psutil")
    assert list((tmp_path / "tmp").iterdir()) == []  # no discovery folder left unprinted
