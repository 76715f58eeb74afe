"""report.html: self-contained, and it renders in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from killdrill.chaos import ChaosOptions, ChaosResult, RunRecord, shrink, write_reports
from killdrill.drill import Drill, DrillOptions
from killdrill.examples import SETTLEMENT

AGENT = list(SETTLEMENT)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real chaos report: a duplicate charge found at a random ms and shrunk, and a clean run."""
    root = tmp_path_factory.mktemp("html")
    drill = Drill([*AGENT, "--bug", "uuid_key"], DrillOptions(timeout=30.0), root=str(root / "w"))
    discovery = drill.discover()
    from killdrill.chaos import chaos_case

    bad = chaos_case(drill, "after:charge_customer", seed=4)  # deterministic: before the checkpoint
    good = chaos_case(drill, "before:read_usage+0.1ms", seed=4)
    assert not bad.ok and good.ok
    result = ChaosResult(ChaosOptions(seed=4, runs=2), discovery, tuple(drill.command))
    result.runs = [RunRecord.of(0, bad, 2.0), RunRecord.of(1, good, 2.0)]
    result.cases = [bad, good]
    result.failures = [shrink(drill, bad, max_runs=4, seed=4, index=0)]
    out = root / "report"
    write_reports(out, result.to_dict())
    return out


def test_html_is_self_contained_and_shows_the_parts(report_dir: Path) -> None:
    html = (report_dir / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html), "external asset"
    assert "<script" not in html
    assert "boundary interval &times; outcome" in html
    assert "during:payments.charge" in html  # the shrunk failure
    assert "killdrill run --schedule" in html  # its reproduction line
    assert "#c62828" in html and "DUPLICATE" in html  # a duplicate effect drawn in red
    assert html.count("<svg") >= 3  # two runs and the shrunk failure


def test_junit_one_testcase_per_run(report_dir: Path) -> None:
    suite = ET.parse(report_dir / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == 2
    failure = cases[0].find("failure")
    assert failure is not None and "duplicate_effect" in failure.get("message", "")
    assert "VIOLATED" in (failure.text or "") and "Reproduce:" in (failure.text or "")
    assert cases[1].find("failure") is None


def test_renders_in_headless_chromium(report_dir: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it")
    png = tmp_path / "report.png"
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
            (report_dir / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and png.exists(), proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 900)
    assert len(data) > 20_000, "the screenshot is (nearly) blank"
    shutil.copy(png, report_dir / "screenshot.png")
