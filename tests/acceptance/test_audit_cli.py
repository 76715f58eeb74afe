"""``killdrill audit`` as a command: exit codes, the table and the JSON file, on real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from killdrill.audit import main
from killdrill.effects import ResultStore
from tests.unit.audit.test_audit import _clean_log


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "killdrill.audit", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_exit_codes_table_and_json(tmp_path: Path) -> None:
    clean = tmp_path / "clean.sqlite"
    _clean_log(str(clean))
    out = _cli(str(clean), "--json", str(tmp_path / "clean.json"))
    assert out.returncode == 0, out.stderr
    assert "keys with >1 fresh success" in out.stdout and "clean" in out.stdout
    data = json.loads((tmp_path / "clean.json").read_text())
    assert data["ok"] is True and data["replay_stats"]["fresh"] == 2

    dirty = tmp_path / "dirty.sqlite"
    with ResultStore(dirty) as s:
        s.claim("stuck", thread="t", node="mail")
    out = _cli(str(dirty), "--in-flight-threshold", "0", "--json", str(tmp_path / "dirty.json"))
    assert out.returncode == 1 and "STUCK stuck" in out.stdout
    assert json.loads((tmp_path / "dirty.json").read_text())["stuck_in_flight"][0]["key"] == "stuck"

    out = _cli()  # a usage error, from a real process: one line, no traceback
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.parametrize(
    "bad",
    [
        ["{tmp}/nope.sqlite"],
        ["postgresql+nosuchdriver://x/y"],
        ["{tmp}/clean.json"],  # not a database
        ["{tmp}/clean.sqlite", "--in-flight-threshold", "soon"],
        [],
    ],
)
def test_bad_input_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list[str]
) -> None:
    """The entry point's own function (``python -m killdrill.audit`` is ``sys.exit(main())``, run
    above): an exception escaping it would fail this test as a traceback would fail the CLI's."""
    _clean_log(str(tmp_path / "clean.sqlite"))
    (tmp_path / "clean.json").write_text("{}")
    try:
        code = main([arg.replace("{tmp}", str(tmp_path)) for arg in bad])
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2, (bad, err)
    assert len(err.strip().splitlines()) == 1, err
