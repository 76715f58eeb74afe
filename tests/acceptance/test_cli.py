"""The command line as a user meets it: exit codes 0/1/2, one-line errors, JSON, no leftovers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.cli_support import run_cli as killdrill

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
STEPS = ["--", "python", str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr.strip().splitlines()[0]


def test_points_prints_the_catalogue(tmp_path: Path) -> None:
    proc = killdrill(tmp_path, "points", "--root", str(tmp_path / "r"), *STEPS)
    assert proc.returncode == 0, proc.stderr
    assert "8 kill points" in proc.stdout and "during:payments.charge" in proc.stdout


def test_run_exit_codes_and_json(tmp_path: Path) -> None:
    ok = killdrill(tmp_path, "run", "-s", "after:charge", "--root", str(tmp_path / "a"), *STEPS)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = tmp_path / "bad.json"
    bad = killdrill(
        tmp_path,
        "run",
        "-s",
        "after:charge",
        "--json",
        str(report),
        "--root",
        str(tmp_path / "b"),
        *STEPS,
        "--bug",
        "nokey",
    )
    assert bad.returncode == 1
    assert "duplicate_effect" in bad.stdout and "killdrill run --schedule after:charge" in bad.stdout
    data = json.loads(report.read_text())
    assert data["cases"][0]["violations"][0]["kind"] == "duplicate_effect"
    assert data["summary"]["violated"] == 1


def test_drill_runs_every_point_and_summarises(tmp_path: Path) -> None:
    proc = killdrill(tmp_path, "drill", "--root", str(tmp_path / "r"), *STEPS, "--bug", "nokey")
    assert proc.returncode == 1
    assert "8 cases: 6 exactly-once, 2 violated" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "-s", "before:nowhere", *STEPS],
            "bad kill point 'before:nowhere': not reached by a clean run",
        ),
        (["run", "-s", "befor:charge", *STEPS], "unknown kind 'befor'"),
        (
            ["run", "-s", "before:charge", "--", "no-such-agent-binary"],
            "command not found: no-such-agent-binary",
        ),
        (["drill"], "no command: put the agent's command after --"),
        (["run", "-s", "before:work", "--", "python", str(AGENTS / "exits.py"), "1"], "exited 1"),
        (
            ["drill", "--identity", "charge", *STEPS],
            "--identity: 'charge': expected PROVIDER.OP=FIELD1,FIELD2",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    line = one_line_error(killdrill(tmp_path, args[0], "--root", str(tmp_path / "runs"), *args[1:]))
    assert line.startswith(("killdrill: error:", f"killdrill {args[0]}: error:")) and message in line
    leftovers = []  # agents of this test only: their KILLDRILL_WORKDIR lies under tmp_path
    for p in psutil.process_iter():
        try:
            if p.environ().get("KILLDRILL_WORKDIR", "").startswith(str(tmp_path)):
                leftovers.append(p)
        except psutil.Error:
            pass
    assert leftovers == []


def test_unknown_subcommand_is_usage_error(tmp_path: Path) -> None:
    proc = killdrill(tmp_path, "explode")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


# ---- user mistakes: one line, exit 2, and said before any case runs --------------------------
# Tests run as root here, and a read-only folder is writable to root: an unwritable path is
# therefore a path under a regular FILE (``file.txt/out.json``), which nobody can create.


def mistake_files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file.txt").write_text("a file, not a folder\n")
    (tmp_path / "bad.json").write_text('{"version": 1, "regressions": [')
    (tmp_path / "garbage.sqlite").write_bytes(b"not a database at all" * 100)
    import sqlite3

    with sqlite3.connect(tmp_path / "other.sqlite") as db:
        db.execute("create table orders (id integer)")
    shard = {
        "chaos": {"seed": 1, "command": ["python"], "shard": "1/2"},
        "runs": [{"index": 0}],
        "cases": [{}],
    }
    (tmp_path / "tampered.json").write_text(json.dumps(shard))
    return {"file": str(tmp_path / "file.txt"), "tmp": str(tmp_path)}


MISTAKES = [
    (
        ["run", "-s", "after:charge", "--json", "{file}/out.json"],
        "--json {file}/out.json: cannot write there: {file} is a file, not a folder",
    ),
    (
        ["run", "-s", "after:charge", "--root", "{file}/r"],
        "--root {file}/r: cannot write there: {file} is a file, not a folder",
    ),
    (["points", "--json", "{file}/p.json"], "--json {file}/p.json: cannot write there: {file} is a file"),
    (["drill", "--json", "{tmp}"], "--json {tmp}: is a folder, expected a file"),
    (
        ["chaos", "--runs", "1", "--report", "{file}/report"],
        "--report {file}/report: cannot write there: {file} is a file",
    ),
    (["chaos", "--runs", "1", "--json", "{file}/c.json"], "--json {file}/c.json: cannot write there"),
    (["chaos", "--runs", "1", "--regressions", "{tmp}/bad.json"], "--regressions {tmp}/bad.json: not JSON"),
    (["chaos", "--runs", "1", "--regressions", "{tmp}/tampered.json"], "not a killdrill regression corpus"),
    (
        ["run", "-s", "after:charge", "--launcher", "fork", "--preload", "no_such_module"],
        "cannot preload no_such_module: ModuleNotFoundError",
    ),
    (
        ["run", "-s", "after:charge", "--ledger-url", "sqlite:///{tmp}/garbage.sqlite"],
        "--ledger-url: ledger {tmp}/garbage.sqlite is unusable: file is not a database",
    ),
    (
        ["drill", "--ledger-url", "sqlite:///{tmp}/other.sqlite"],
        "--ledger-url: ledger {tmp}/other.sqlite is unusable: it is a SQLite database but not a killdrill",
    ),
    (
        ["run", "-s", "after:charge", "--max-attempts", "-1"],
        "--max-attempts: expected a whole number >= 1, got '-1'",
    ),
    (
        ["run", "-s", "after:charge", "--timeout", "inf"],
        "--timeout: expected a number of seconds > 0, got 'inf'",
    ),
    (["run", "-s", "after:charge", "--env", "=x"], "--env: '=x': expected NAME=VALUE"),
    (["chaos", "--shrink-runs", "0"], "--shrink-runs: expected a whole number >= 1, got '0'"),
    (["chaos", "--max-failures", "0"], "--max-failures: expected a whole number >= 1, got '0'"),
    (["chaos", "--runs", "0"], "--runs: expected a whole number >= 1, got '0'"),
]


@pytest.mark.parametrize(("args", "message"), MISTAKES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in MISTAKES])
def test_a_mistake_is_one_line_exit_2_before_any_case(tmp_path: Path, args: list[str], message: str) -> None:
    where = mistake_files(tmp_path)
    args = [a.format(**where) for a in args]
    root = tmp_path / "runs"
    if "--root" not in args:
        args += ["--root", str(root)]
    proc = killdrill(tmp_path, *args, *STEPS)
    line = one_line_error(proc)
    assert message.format(**where) in line
    assert len(proc.stderr.strip().splitlines()) <= 2  # chaos prints its seed first
    if root.exists() and "--preload" not in args:  # nothing ran: no case or discovery workdir
        assert [p.name for p in root.iterdir()] == []


def test_report_merge_of_tampered_shards_is_one_line(tmp_path: Path) -> None:
    where = mistake_files(tmp_path)
    tampered = f"{where['tmp']}/tampered.json"
    line = one_line_error(killdrill(tmp_path, "report", "--merge", tampered, tampered))
    assert line.startswith("killdrill: error: not chaos reports of one job (edited by hand?):")


def test_main_turns_every_killdrill_error_into_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from killdrill.cli import commands as cli
    from killdrill.errors import HarnessError

    def broken(args: object) -> int:
        raise HarnessError("the harness\nbroke")

    monkeypatch.setattr(cli, "cmd_points", broken)
    assert cli.main(["points", "--", "python", "agent.py"]) == 2
    assert capsys.readouterr().err.startswith("killdrill: error: the harness\n")
