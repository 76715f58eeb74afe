"""Deployed cases at once (``--workers 2``): each case's services get their own ports, workdir
and ledger, so two cases run side by side with no cross-talk, each judged exactly-once on its own
effects, and a buggy service is still caught.  The CLI and the pytest route alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.test_deployments import CLIENT, SHOP
from tests.cli_support import run_cli
from tests.leftovers import survivors

POINTS = "api:before:charge;api:during:payments.charge;api:after:charge;driver:after:submit"


def drill(tmp_path: Path, *args: str, points: str = POINTS) -> tuple[int, str]:
    """``killdrill drill --points POINTS ARGS``; asserts no process of a case outlived the drill."""
    root = str(tmp_path / "w")
    out = run_cli(tmp_path, "drill", "--points", points, "--discovery-runs", "1", "--root", root, *args)
    assert not survivors(str(tmp_path / "w"), seconds=0.3), "a process of a case survived it"
    return out.returncode, out.stdout + out.stderr


def spans(root: Path) -> list[tuple[float, float]]:
    """Each kept case's span: its plan written at its start, its result at its end."""
    out = []
    for case in root.iterdir():
        state = case / ".killdrill"
        if (state / "plan.json").exists() and (state / "result.json").exists():
            out.append(((state / "plan.json").stat().st_mtime, (state / "result.json").stat().st_mtime))
    return sorted(out)


def test_two_deployed_cases_at_once_are_each_exactly_once_on_their_own(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    rc, text = drill(tmp_path, "--workers", "2", "--keep", "--json", str(out), "--serve", SHOP, "--", *CLIENT)
    assert rc == 0 and "4 cases: 4 exactly-once" in text, text
    for case in json.loads(out.read_text())["cases"]:  # each ledger holds its own case's charge only
        calls = [c for c in case["ledger"]["calls"] if c["provider"] == "payments"]
        assert calls and {c["key"] for c in calls} == {"order:{thread}"}, case  # its own thread, normalized
        assert {c["attempt"] for c in calls} <= {a["number"] for a in case["attempts"]}, case
    first, *rest = spans(tmp_path / "w")
    assert any(start < first[1] for start, _ in rest), "no two cases ran at once"


def test_a_buggy_service_is_caught_with_two_workers(tmp_path: Path) -> None:
    two = "api:during:payments.charge;api:after:charge"
    rc, text = drill(tmp_path, "--workers", "2", "--serve", SHOP + " --bug nokey", "--", *CLIENT, points=two)
    assert rc == 1, text
    assert "duplicate_effect" in text and "(api) kill api:during:payments.charge" in text, text


@pytest.mark.slow  # an inner pytest session: ~15 s on a loaded machine
def test_the_pytest_route_runs_deployed_cases_at_once(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\n")
    points = POINTS.split(";")
    pytester.makepyfile(
        test_inner=f"""
        import pytest
        CLIENT = {CLIENT!r}
        BUGGY = {SHOP.split("=", 1)[1] + " --bug nokey"!r}

        @pytest.mark.killdrill(points={points!r}, serve={{"api": {SHOP.split("=", 1)[1]!r}}}, workers=2)
        def test_correct(killdrill, kill_point):
            killdrill.run(CLIENT, kill_point).assert_exactly_once()

        @pytest.mark.killdrill(points={points[1:2]!r}, serve={{"api": BUGGY}}, workers=2)
        def test_buggy(killdrill, kill_point):
            killdrill.run(CLIENT, kill_point).assert_exactly_once()
        """
    )
    res = pytester.runpytest("-v")
    res.assert_outcomes(passed=4, failed=1)
    assert "duplicate_effect" in res.stdout.str()
