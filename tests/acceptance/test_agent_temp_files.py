"""What a drill's processes leave in their temporary folder goes with the run: every process a
drill starts gets a TMPDIR of the run's own, never the system's."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

import killdrill

AGENT = [
    "python",
    "-m",
    "tests.agents.basic.temp_files",
    "--thread",
    "{thread}",
    "--workdir",
    "{workdir}",
]


@pytest.fixture
def system_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private system temporary folder for the harness (and what it starts) to be seen in."""
    tmp = tmp_path / "system-tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return tmp


def _left(tmp: Path) -> list[str]:
    """What is in ``tmp`` but the harness's own record of claims (its owner, this process, lives)."""
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if "killdrill-owners-" not in str(p))


@pytest.mark.parametrize(("root", "launcher"), [("made", "spawn"), ("long", "fork")])
def test_an_agent_killed_with_temporary_files_leaves_nothing_in_the_system_temp_dir(
    system_tmp: Path, tmp_path: Path, root: str, launcher: str
) -> None:
    """Killed during its charge, then resumed: its ``pymp-*``, ``mkstemp`` and ``mkdtemp`` are
    gone with the run, in a root the drill made or one given, whether it was spawned or forked
    from a template that had looked its own temporary folder up (under pytest's basetemp the
    run's folder is the drill's short one; the workdir's own: tests/unit/drill/test_workdirs.py)."""
    given = None if root == "made" else tmp_path / ("deep-" * 12) / "root"
    preload = ["tests.agents.basic.temp_lookup"] if launcher == "fork" else []
    with killdrill.Drill(AGENT, discovery_runs=1, root=given, launcher=launcher, preload=preload) as drill:
        result = drill.run_case("during:payments.charge")
        assert result.ok, result
        assert [a.outcome.value for a in result.attempts] == ["killed", "exited"]
    assert _left(system_tmp) == []
    if given is not None:
        assert not any(given.rglob("agent-*")) and not any(given.rglob("pymp-*"))
