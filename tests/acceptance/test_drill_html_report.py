"""``killdrill drill --report DIR``: a drill writes report.json and the same self-contained HTML
page as chaos, and the page renders in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_support import STEPS, run_cli


@pytest.fixture(scope="module")
def drilled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A two-case drill of the keyless charge: one case violated, one exactly-once."""
    root = tmp_path_factory.mktemp("drill-html")
    out = root / "report"
    proc = run_cli(
        root,
        "drill",
        "--report",
        str(out),
        "--discovery-runs",
        "1",
        "--points",
        "during:payments.charge;before:decide",
        "--",
        *STEPS,
        "--bug",
        "nokey",
    )
    return out, proc


def test_a_drill_writes_the_html_and_json_report(
    drilled: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, proc = drilled
    assert proc.returncode == 1, proc.stderr
    html = (out / "report.html").read_text()
    data = json.loads((out / "report.json").read_text())
    assert [c["schedule"] for c in data["cases"]] == ["during:payments.charge", "before:decide"]
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html) and "<script" not in html
    assert "<h2>Violated cases</h2>" in html and "duplicate_effect" in html
    assert "killdrill run --schedule during:payments.charge" in html  # the reproduction line
    assert "DUPLICATE" in html and html.count("<svg") == 2  # the violated case open, the clean one folded
    assert "<details class='clean'><summary>1 case(s) without a violation</summary>" in html
    assert f"report in {out / 'report.html'}" in proc.stderr


def test_a_report_dir_that_cannot_be_written_is_a_usage_error_before_any_case(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    proc = run_cli(tmp_path, "drill", "--report", str(tmp_path / "file" / "r"), "--", *STEPS)
    assert proc.returncode == 2 and "--report" in proc.stderr and "is a file, not a folder" in proc.stderr
    assert "case(s) over" not in proc.stderr  # nothing ran


def test_the_drill_report_renders_in_headless_chromium(
    drilled: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it")
    out, _ = drilled
    png = tmp_path / "drill.png"
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'ud'}",
            f"--screenshot={png}",
            "--window-size=1200,900",
            (out / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and png.exists(), proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == (1200, 900)
    assert len(data) > 20_000, "the screenshot is (nearly) blank"
    shutil.copy(png, out / "screenshot.png")
