"""Drill files are private whatever the umask and --root; no empty temp root is left behind;
numbers on the command line are validated; durations print in a form that parses back."""

from __future__ import annotations

import math
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from killdrill.points import MAX_MS, Fault, ScheduleError, parse_fault

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
STEPS = ["python", str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]


def killdrill(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "killdrill", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
        preexec_fn=lambda: os.umask(0o022),  # the common umask: files readable by others
    )


def test_a_root_tree_is_private_from_other_users(tmp_path: Path) -> None:
    root = tmp_path / "ci" / "drills"
    run = killdrill(
        "run", "--schedule", "after:charge", "--keep", "--root", str(root), "--env", "API_TOKEN=s3cret",
        "--discovery-runs", "1", "--", *STEPS,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    workdirs = [p for p in root.iterdir() if p.is_dir()]
    assert workdirs
    plan = next(root.glob("*/.killdrill/plan.json"))
    assert "s3cret" in plan.read_text()  # what must not leak
    for wd in workdirs:
        for path in (wd, wd / ".killdrill"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to read as another user (uid 65534)")
    tmp_path.chmod(0o755)
    (tmp_path / "ci").chmod(0o755)
    targets = [plan, *root.glob("*/.killdrill/ledger.sqlite"), *root.glob("*/.killdrill/attempt-1.stdout")]
    for target in targets:
        other = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(target)],
            capture_output=True,
            text=True,
        )
        assert other.returncode != 0 and "Permission denied" in other.stderr, target


def test_no_empty_temp_root_is_left_behind(tmp_path: Path) -> None:
    """A run leaves no empty killdrill-XXXX directory in the temp dir."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run = killdrill(
        "run", "--schedule", "after:charge", "--discovery-runs", "1", "--", *STEPS, env={"TMPDIR": str(tmp)}
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert [p.name for p in tmp.iterdir() if p.name.startswith("killdrill-")] == []
    # a failing case keeps its workdir, so its root stays (the report names it)
    failing = killdrill(
        "run", "--schedule", "after:charge", "--discovery-runs", "1", "--", *STEPS, "--bug", "nokey",
        env={"TMPDIR": str(tmp)},
    )  # fmt: skip
    assert failing.returncode == 1, failing.stdout + failing.stderr
    kept = [p for p in tmp.iterdir() if p.name.startswith("killdrill-")]
    assert len(kept) == 1 and any(kept[0].iterdir()) and str(kept[0]) in failing.stdout


@pytest.mark.parametrize(
    "option",
    [
        "--timeout=-1", "--timeout=0", "--timeout=inf", "--timeout=nan", "--grace=-0.5", "--resumers=0",
        "--resumers=-1", "--max-attempts=-3", "--max-attempts=0", "--discovery-runs=0", "--timeout=abc",
    ],
)  # fmt: skip
def test_bad_numbers_are_one_line_usage_errors(option: str) -> None:
    run = killdrill("run", "--schedule", "after:charge", option, "--", *STEPS)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and option.split("=")[0] in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "usage:" not in run.stderr


@pytest.mark.parametrize(
    ("command", "flag"), [("drill", "--workers"), ("chaos", "--processes"), ("chaos", "--workers")]
)
def test_negative_workers_is_a_usage_error(command: str, flag: str) -> None:
    run = killdrill(command, f"{flag}=-2", "--", *STEPS)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and flag in run.stderr, run.stderr


def test_durations_print_in_a_form_that_parses_back() -> None:
    assert str(parse_fault("offset:2000s")) == "offset:2000000ms"  # was offset:2e+06ms, unparseable
    assert str(parse_fault("before:x#2+0.5us")) == "before:x#2+0.0005ms"
    assert str(parse_fault("after:x~123.4567ms")) == "after:x~123.4567ms"  # {:g} rounded to 123.457


@pytest.mark.parametrize("text", ["offset:" + "9" * 400 + "s", "offset:604801s", "before:x~1000000000ms"])
def test_infinite_or_absurd_durations_are_refused(text: str) -> None:
    with pytest.raises(ScheduleError, match="at most a week"):
        parse_fault(text)


@given(st.floats(min_value=0, max_value=MAX_MS), st.sampled_from(["offset", "delay", "hold"]))
def test_every_duration_round_trips(ms: float, field: str) -> None:
    kill = Fault(offset_ms=ms) if field == "offset" else Fault("before:x", **{f"{field}_ms": ms})
    again = parse_fault(str(kill))
    assert again == kill and str(again) == str(kill)
    assert math.isfinite(ms)
