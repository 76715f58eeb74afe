"""A user's MCP server behind the counting proxy, started as the MCP SDKs start servers: with
their minimal default environment (no ``KILLDRILL_*``).  The proxy finds the drill's ledger in the
agent's environment, judges a replay by the booking it names (not by the answer's bytes: the
correct server answers ``"replayed": true`` and the time), and names the buggy server's second
booking with a cause that agrees with ``--key``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.frameworks import need

need("mcp", "mcp")

from killdrill.drill import Drill, DrillOptions  # noqa: E402

PY = sys.executable
REPO = Path(__file__).parents[2]
AGENT = [PY, "-m", "tests.agents.mcp.rooms_agent", "--workdir", "{workdir}", "--"]
PROXY = [PY, "-m", "killdrill.fakes.mcp", "--proxy", "hotel"]
SERVER = ["--", PY, "-m", "tests.agents.mcp.rooms_server", "--db", "{workdir}/hotel.db"]
POINTS = ["during:hotel.book_room", "during:hotel.book_room#2"]


def _drill(tmp_path: Path, proxy: list[str], *bug: str, launcher: str = "spawn") -> Drill:
    options = DrillOptions(root=tmp_path, timeout=60, discovery_runs=1, cwd=str(REPO), launcher=launcher)
    return Drill([*AGENT, *PROXY, *proxy, *SERVER, *bug], options)


def test_the_correct_server_is_exactly_once_at_every_point_its_env_stripped(tmp_path: Path) -> None:
    with _drill(tmp_path, ["--key", "book_room=request_id"]) as drill:
        assert drill.discover().labels() == POINTS  # the calls reached the case's ledger
        cases = [drill.run_case(point) for point in POINTS]
    assert all(case.ok for case in cases), [case.text() for case in cases if not case.ok]
    for case in cases:
        assert case.ledger is not None
        outcomes = sorted(c.outcome for c in case.ledger.calls)
        assert outcomes == ["created", "created", "replayed"], case.ledger.calls  # the lost answer replayed


def test_the_buggy_server_is_caught_with_a_cause_that_agrees_with_key(tmp_path: Path) -> None:
    with _drill(tmp_path, ["--key", "book_room=request_id"], "--bug", "second-booking") as drill:
        case = drill.run_case("during:hotel.book_room")
    assert case.kinds == ("duplicate_effect",), case.text()
    (violation,) = case.violations
    assert violation.cause == "provider_not_deduping", case.text()
    assert "under the one key" in (violation.observed or "") and "takes no" not in case.text()


@pytest.mark.slow
def test_the_result_field_judges_replays_and_the_ledger_placeholder_is_the_drills(tmp_path: Path) -> None:
    proxy = ["--ledger", "{KILLDRILL_LEDGER}", "--result", "book_room=booking_id"]
    with _drill(tmp_path / "ok", proxy) as drill:
        assert drill.discover().labels() == POINTS
        ok = [drill.run_case(point) for point in POINTS]
    assert all(case.ok for case in ok), [case.text() for case in ok if not case.ok]
    with _drill(tmp_path / "bug", proxy, "--bug", "second-booking") as drill:
        bug = drill.run_case("during:hotel.book_room#2")
    assert bug.kinds == ("duplicate_effect",), bug.text()


@pytest.mark.slow  # the fork launcher's path; the spawned agent's runs per push
def test_an_agent_forked_from_the_template_is_found_too(tmp_path: Path) -> None:
    """``--launcher fork``: /proc shows the template's environment for the agent, not its own."""
    keyed = ["--key", "book_room=request_id"]
    with _drill(tmp_path, keyed, "--bug", "second-booking", launcher="fork") as drill:
        assert drill.discover().labels() == POINTS
        case = drill.run_case("during:hotel.book_room#2")
    assert case.kinds == ("duplicate_effect",), case.text()


@pytest.mark.slow  # the API route catches the same server per push
def test_the_cli_route_catches_the_buggy_server_with_its_cause(tmp_path: Path) -> None:
    command = [*AGENT, *PROXY, "--key", "book_room=request_id", *SERVER, "--bug", "second-booking"]
    argv = [PY, "-m", "killdrill", "drill", "--discovery-runs", "1", "--root", str(tmp_path / "r")]
    argv += ["--points", "during:hotel.book_room#2", "--json", str(tmp_path / "r.json"), "--", *command]
    out = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL, timeout=300
    )
    assert out.returncode != 0, out.stdout + out.stderr
    assert "duplicate_effect" in out.stdout and "provider_not_deduping" in out.stdout, out.stdout
    assert "takes no idempotency key" not in out.stdout


@pytest.mark.slow  # an inner pytest session
def test_the_pytest_route_passes_the_correct_server_and_fails_the_buggy_one(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 60\n")
    keyed = [*AGENT, *PROXY, "--key", "book_room=request_id", *SERVER]
    pytester.makepyfile(
        test_inner=f"""
        import pytest
        CORRECT = {keyed!r}
        BUGGY = CORRECT + ["--bug", "second-booking"]

        @pytest.mark.killdrill(points=["during:hotel.book_room#2"], cwd={str(REPO)!r})
        def test_correct(killdrill, kill_point):
            killdrill.run(CORRECT, kill_point).assert_exactly_once()

        @pytest.mark.killdrill(points=["during:hotel.book_room#2"], cwd={str(REPO)!r})
        def test_buggy(killdrill, kill_point):
            killdrill.run(BUGGY, kill_point).assert_exactly_once()
        """
    )
    res = pytester.runpytest("-v")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "provider_not_deduping" in out and "takes no idempotency key" not in out
