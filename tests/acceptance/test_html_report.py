"""report.html: self-contained, and it renders in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html import unescape
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from killdrill.chaos.job import ChaosOptions, ChaosResult, RunRecord, shrink, write_reports
from killdrill.drill import Drill, DrillOptions
from killdrill.examples import SETTLEMENT
from killdrill.report.html import render_html

if TYPE_CHECKING:
    from tests.conftest import SharedDiscoveries

AGENT = list(SETTLEMENT)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory, shared_discovery: SharedDiscoveries) -> Path:
    """A small real chaos report: a duplicate charge found at a random ms and shrunk, and a clean run."""
    root = tmp_path_factory.mktemp("html")
    drill = Drill([*AGENT, "--bug", "uuid_key"], DrillOptions(timeout=30.0), root=str(root / "w"))
    discovery = shared_discovery(drill).discover()  # test_chaos.py drills this command too
    from killdrill.chaos.job import chaos_case

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


LAYOUT_PROBE = """<script>
document.querySelectorAll('details').forEach(d => { d.open = true; });
const problems = [];
const page = document.documentElement;
if (page.scrollWidth > page.clientWidth) problems.push('page scrolls sideways: ' + page.scrollWidth);
for (const svg of document.querySelectorAll('svg')) {
  const box = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll('text')]
    .map(t => [t.firstChild.textContent, t.getBoundingClientRect()]);
  for (const [label, r] of texts) {
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5
        || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
      problems.push('clipped by its svg: ' + label);
  }
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const [la, a] = texts[i], [lb, b] = texts[j];
    if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
      problems.push('overlap: ' + la + ' / ' + lb);
  }
  if (box.right > page.clientWidth) problems.push('svg wider than the page');
}
for (const el of document.querySelectorAll('body *')) {
  if (el.closest('svg') || el.id === 'layout') continue;
  if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0)
    problems.push('overflows its box: ' + el.tagName + ' ' + el.textContent.slice(0, 60));
}
const out = document.createElement('pre');
out.id = 'layout';
out.textContent = JSON.stringify({problems, texts: document.querySelectorAll('svg text').length});
document.body.appendChild(out);
</script>"""


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it")
    return chromium


def _headless(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'ud'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def thirty_runs(report_dir: Path) -> Path:
    """The report of 30 runs, one violated: the real runs of ``report_dir``, the clean one repeated."""
    data = json.loads((report_dir / "report.json").read_text())
    bad_run, good_run = data["runs"]
    bad_case, good_case = data["cases"]
    data["runs"] = [bad_run] + [{**good_run, "index": i} for i in range(1, 30)]
    data["cases"] = [bad_case] + [good_case] * 29
    data["summary"] = {**data["summary"], "runs": 30, "runs_clean": 29}
    page = report_dir.parent / "thirty.html"
    page.write_text(render_html(data), encoding="utf-8")
    return page


def test_layout_at_1400px_no_text_clipped_or_overlapping(thirty_runs: Path, tmp_path: Path) -> None:
    """Every label inside its SVG, no two labels on top of each other, nothing wider than its box,
    with every folded run unfolded; measured by Chromium's layout, not by reading the HTML."""
    chromium = _chromium()
    probe = tmp_path / "probe.html"
    probe.write_text(thirty_runs.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    proc = _headless(chromium, tmp_path, "--window-size=1400,1000", "--dump-dom", probe.as_uri())
    found = re.search(r"<pre id=\"layout\">(.*?)</pre>", proc.stdout, flags=re.S)
    assert found, proc.stderr[-2000:]
    layout = json.loads(unescape(found.group(1)))
    assert layout["texts"] > 100
    assert layout["problems"] == []


def test_clean_runs_fold_and_attempts_read_as_outcomes(thirty_runs: Path, tmp_path: Path) -> None:
    html = thirty_runs.read_text()
    assert "<details class='clean'><summary>29 run(s) without a violation</summary>" in html
    assert ">point_not_reached" not in html and "rc 0" not in html
    assert "time since each attempt started" in html and "class='tick'" in html
    chromium = _chromium()
    png = tmp_path / "thirty.png"
    proc = _headless(
        chromium, tmp_path, "--window-size=1400,1000", f"--screenshot={png}", thirty_runs.as_uri()
    )
    assert proc.returncode == 0 and png.exists(), proc.stderr[-2000:]
    probe = tmp_path / "height.html"
    script = "<script>document.body.dataset.h = document.documentElement.scrollHeight;</script>"
    probe.write_text(html.replace("</body>", script + "</body>"))
    proc = _headless(chromium, tmp_path, "--window-size=1400,1000", "--dump-dom", probe.as_uri())
    height = re.search(r'data-h="(\d+)"', proc.stdout)
    assert height, proc.stderr[-2000:]
    # folded: 30 runs in a short page (a failure carries its cause, fix and messages: ~2000 px)
    assert int(height.group(1)) < 2400, "30 runs with the clean ones folded fit in a short page"
    shutil.copy(png, thirty_runs.parent / "thirty.png")
