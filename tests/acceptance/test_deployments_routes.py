"""A deployment through the pytest plugin: the marker's ``serve=`` keyword runs the services
beside the driver, and a kill aimed at a service (``api:POINT``) restarts it."""

from __future__ import annotations

from pathlib import Path

import pytest

import killdrill.drill
import killdrill.ledger
import killdrill.report.drill
import killdrill.verdict  # noqa: F401 - imported once here (see test_pytest_plugin)

DEPLOY = Path(__file__).parent.parent / "agents" / "deploy"


@pytest.mark.slow  # an inner pytest session: ~18 s on a loaded machine
def test_the_marker_serves_a_service_and_the_buggy_one_fails(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\n")
    shop = f"python {DEPLOY / 'shop.py'} --port {{port}} --state {{workdir}}/orders"
    client = [
        "python",
        str(DEPLOY / "client.py"),
        "--url",
        "http://127.0.0.1:{port}/orders",
        "--order",
        "{thread}",
    ]
    pytester.makepyfile(
        test_inner=f"""
        import pytest
        CLIENT = {client!r}
        BUGGY = {shop + " --bug nokey"!r}

        @pytest.mark.killdrill(points=["api:during:payments.charge"], serve={{"api": {shop!r}}})
        def test_correct(killdrill, kill_point):
            killdrill.run(CLIENT, kill_point).assert_exactly_once()

        @pytest.mark.killdrill(points=["api:during:payments.charge"], serve={{"api": BUGGY}})
        def test_buggy(killdrill, kill_point):
            killdrill.run(CLIENT, kill_point).assert_exactly_once()
        """
    )
    res = pytester.runpytest("-v")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "test_correct[api:during:payments.charge] PASSED" in out
    assert "duplicate_effect" in out and "(api) kill api:during:payments.charge" in out
