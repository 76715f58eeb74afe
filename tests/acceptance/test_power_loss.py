"""Power loss drills a checkpoint's durability: a JSON checkpoint written without fsync and SQLite in
WAL mode under synchronous=NORMAL survive every SIGKILL and are caught by a power loss (a
duplicate charge, cause unsynced_write, the file named); with fsync / synchronous=FULL the same
agents are exactly-once at every point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.faults.lossy_mount import is_mounted, unavailable
from killdrill.records import DUPLICATE_EFFECT, CaseResult

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

AGENTS = Path(__file__).parents[1] / "agents" / "power"
JSON = [sys.executable, str(AGENTS / "json_checkpoint.py"), "--ckpt", "{workdir}/checkpoint.json"]
SQLITE = [sys.executable, str(AGENTS / "sqlite_checkpoint.py"), "--db", "{workdir}/state.db"]


def charges(case: CaseResult) -> dict[str, list[str]]:
    """Each payee's landed charges in the case's ledger, by key."""
    assert case.ledger is not None
    out: dict[str, list[str]] = {}
    for c in case.ledger.calls:
        if c.op == "charge" and c.landed:
            out.setdefault(str(c.payload["customer"]), []).append(str(c.key))
    return out


@pytest.mark.parametrize(
    ("command", "lost"),
    [([*JSON, "--bug", "no-fsync"], "checkpoint.json"), ([*SQLITE, "--bug", "normal"], "state.db-wal")],
    ids=["json-no-fsync", "sqlite-normal"],
)
def test_a_checkpoint_not_synced_survives_a_kill_and_a_power_loss_repeats_the_charge(
    tmp_path: Path, command: list[str], lost: str
) -> None:
    with Drill(command, DrillOptions(root=tmp_path)) as drill:
        killed = drill.run_case("after:pay_alice")
        assert killed.ok, killed.text()
        case = drill.run_case("powerloss:after:pay_alice")
    assert not case.ok
    duplicate = next(v for v in case.violations if v.kind == DUPLICATE_EFFECT)
    assert duplicate.cause == "unsynced_write"
    assert f"dropped the unsynced data of {lost}" in duplicate.observed
    assert "synchronous=FULL" in duplicate.fix if lost.endswith("-wal") else "os.fsync" in duplicate.fix
    first = case.attempts[0]
    assert [w["path"] for w in first.lost_writes] == [lost]
    # the ledger: alice charged twice under two keys (the checkpointed key was lost), bob once
    paid = charges(case)
    assert len(paid["alice"]) == 2 and len(set(paid["alice"])) == 2 and len(paid["bob"]) == 1
    assert "reproduce" in case.to_dict() and "powerloss:after:pay_alice" in case.reproduce
    assert not is_mounted(Path(case.workdir))
    assert [p.name for p in tmp_path.rglob(".killdrill-lossy-*")] == []


def exactly_once(case: CaseResult) -> None:
    assert case.ok, case.text()
    paid = charges(case)
    assert sorted(paid) == ["alice", "bob"] and all(len(keys) == 1 for keys in paid.values()), paid
    assert case.attempts[0].killed_at is not None
    assert not any(w["path"] in ("checkpoint.json", "state.db-wal") for w in case.attempts[0].lost_writes)


@pytest.mark.parametrize("command", [JSON, SQLITE], ids=["json-fsync", "sqlite-full"])
def test_a_synced_checkpoint_is_exactly_once_under_a_power_loss_while_the_charge_is_answered(
    tmp_path: Path, command: list[str]
) -> None:
    with Drill(command, DrillOptions(root=tmp_path)) as drill:
        exactly_once(drill.run_case("powerloss:during:payments.charge"))


@pytest.mark.slow
@pytest.mark.parametrize("command", [JSON, SQLITE], ids=["json-fsync", "sqlite-full"])
def test_a_synced_checkpoint_is_exactly_once_under_a_power_loss_at_every_point(
    tmp_path: Path, command: list[str]
) -> None:
    with Drill(command, DrillOptions(root=tmp_path)) as drill:
        points = drill.points()
        result = drill.run_all([f"powerloss:{p}" for p in points])
    assert len(result.cases) == len(points) == 6
    for case in result.cases:
        exactly_once(case)


def test_a_folder_outside_the_workdir_loses_its_unsynced_data_when_named(tmp_path: Path) -> None:
    state = tmp_path / "agent-state"
    state.mkdir()
    command = [*JSON, "--bug", "no-fsync"]
    command[command.index("{workdir}/checkpoint.json")] = str(state / "{thread}.json")
    with Drill(command, DrillOptions(root=tmp_path / "plain")) as drill:
        assert drill.run_case("powerloss:after:pay_alice").ok  # its checkpoint is not in the workdir
    with Drill(command, DrillOptions(root=tmp_path / "named", power_loss_paths=(str(state),))) as drill:
        case = drill.run_case("powerloss:after:pay_alice")
    duplicate = next(v for v in case.violations if v.kind == DUPLICATE_EFFECT)
    assert duplicate.cause == "unsynced_write"
    (lost,) = case.attempts[0].lost_writes
    assert lost["path"] == str(state / f"{case.thread}.json") and lost["size_kept"] == 0
    assert "--power-loss-path" in case.reproduce
    assert not is_mounted(state) and sorted(p.name for p in tmp_path.iterdir()) == [
        "agent-state",
        "named",
        "plain",
    ]


def test_the_pytest_marker_drills_a_power_loss_and_its_point_reruns_it(pytester: pytest.Pytester) -> None:
    """``@pytest.mark.killdrill(points=["powerloss:..."], power_loss_paths=...)``: the case fails
    with the cause, and the pytest reproduction (``--killdrill-point``) runs the same fault."""
    state = pytester.path / "state"
    state.mkdir()
    command = [*JSON, "--bug", "no-fsync"]
    command[command.index("{workdir}/checkpoint.json")] = str(state / "{thread}.json")
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\n")
    pytester.makepyfile(
        test_inner=f"""
        import pytest

        @pytest.mark.killdrill(points=["powerloss:after:pay_alice"], power_loss_paths=[{str(state)!r}])
        def test_payouts(killdrill, kill_point):
            killdrill.run({command!r}, kill_point).assert_exactly_once()
        """
    )
    first = pytester.runpytest("-p", "no:cacheprovider")
    first.assert_outcomes(failed=1)
    text = first.stdout.str()
    assert "cause: unsynced_write" in text and f"{state}/" in text, text
    assert "--killdrill-point=powerloss:after:pay_alice" in text, text
    again = pytester.runpytest("-p", "no:cacheprovider", "--killdrill-point=powerloss:after:pay_alice")
    again.assert_outcomes(failed=1)
    assert "cause: unsynced_write" in again.stdout.str()
    assert not is_mounted(state)


PAGE = Path(__file__).resolve().parents[2] / "docs" / "faults.md"


def doc_lines() -> list[tuple[str, int]]:
    """The power-loss section's first block of commands as written, each with the exit code its
    comment promises (0: exactly-once, 1: caught)."""
    section = PAGE.read_text(encoding="utf-8").split("## Power loss", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    out = []
    for line in block.splitlines():
        if line.startswith("killdrill "):
            command, _, promise = line.partition("  #")
            out.append((command.strip(), 0 if "exactly-once" in promise else 1))
    return out


@pytest.mark.slow
def test_the_docs_power_loss_lines_do_what_their_comments_say(tmp_path: Path) -> None:
    lines = doc_lines()
    assert [(c.split()[1], code) for c, code in lines] == [
        ("run", 0), ("run", 1), ("drill", 0), ("run", 1), ("run", 0), ("chaos", 1)
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)  # the failing cases' workdirs are kept in the default root
    for command, code in lines:
        done = subprocess.run(
            ["bash", "-c", f"A=tests/agents/power\n{command}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=PAGE.parents[1],
            timeout=300,
        )
        assert done.returncode == code, f"{command}\n{done.stdout}{done.stderr}"
        if code == 1 and not command.startswith("killdrill chaos"):
            assert "unsynced_write" in done.stdout, done.stdout
