"""Real drills of an unmodified agent (stripe SDK, gocardless_pro, httpx, requests, smtplib):
the correct form passes every point; each planted pitfall is caught with the right kind."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

# Found, not imported: the agents import them in their own processes (the SDKs take seconds to
# import, and every xdist worker collects this module).
_missing = [m for m in ("aiosmtpd", "httpx", "requests", "stripe", "gocardless_pro")
            if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(f"needs {', '.join(_missing)}", allow_module_level=True)

from killdrill.drill import Drill, DrillOptions  # noqa: E402

SHOP = str(Path(__file__).parents[1] / "agents" / "wire" / "shop.py")
AGENT = ["python", SHOP, "--order", "o-{thread}", "--state", "{workdir}/state.json"]


def drill(tmp_path: Path, *extra: str, launcher: str = "spawn") -> Drill:
    # a fork template imports the SDKs once
    preload = ("stripe", "gocardless_pro", "httpx", "requests") if launcher == "fork" else ()
    options = DrillOptions(
        root=tmp_path,
        http_fakes=True,
        smtp_fake=True,
        timeout=60,
        discovery_runs=1,
        launcher=launcher,
        preload=preload,
    )
    return Drill([*AGENT, *extra], options)


def test_correct_agent_passes_every_point(tmp_path: Path) -> None:
    # forked attempts: the planted pitfalls below spawn theirs, unmodified
    with drill(tmp_path, launcher="fork") as d:
        _every_point_passes(d)


def _every_point_passes(d: Drill) -> None:
    points = d.points()
    assert points == [
        "during:payments.charge",
        "during:gocardless.payment",
        "during:razorpay.payout",
        "during:hooks.post",
        "during:hooks.post#2",
        "during:mailbox.send",
    ]
    for point in points:
        result = d.run_case(point)
        assert result.ok, result.text()


@pytest.mark.parametrize(
    ("bug", "point", "provider"),
    [
        ("stripe-auto-key", "during:payments.charge", "payments"),
        ("gocardless-auto-key", "during:gocardless.payment", "gocardless"),
        ("payout-random-key", "during:razorpay.payout", "razorpay"),
        ("hook-random-key", "during:hooks.post", "hooks"),
    ],
)
def test_a_per_attempt_key_is_caught_as_key_changed(
    tmp_path: Path, bug: str, point: str, provider: str
) -> None:
    result = drill(tmp_path, "--bug", bug).run_case(point)
    kinds = {(v.kind, v.provider) for v in result.violations}
    assert {("duplicate_effect", provider), ("key_changed", provider)} <= kinds, result.text()


def test_an_ungated_smtplib_send_is_a_duplicate_effect(tmp_path: Path) -> None:
    result = drill(tmp_path, "--bug", "mail-ungated").run_case("during:mailbox.send")
    (violation,) = result.violations
    assert (violation.kind, violation.provider, violation.op) == ("duplicate_effect", "mailbox", "send")
    assert [c.key for c in violation.calls] == [None, None], result.text()
    assert "sent without an idempotency key" in violation.message


def test_cli_reproduction_line_carries_the_smtp_fake(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "killdrill", "run", "--http-fakes", "--smtp-fake", "--discovery-runs", "1"]
    cmd += [
        "--root",
        str(tmp_path),
        "--schedule",
        "during:mailbox.send",
        "--",
        *AGENT,
        "--bug",
        "mail-ungated",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "duplicate_effect" in out.stdout
    assert "--http-fakes --smtp-fake" in out.stdout


def test_pytest_marker_keyword_starts_the_smtp_fake(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_http_fakes = true\n")
    agent = [*AGENT, "--bug", "mail-ungated"]
    pytester.makepyfile(
        test_inner_mail=f"""
        import pytest
        AGENT = {agent!r}

        @pytest.mark.killdrill(points=["during:mailbox.send"], smtp_fake=True)
        def test_marker(killdrill, kill_point):
            assert killdrill.run(AGENT, kill_point).kinds == ("duplicate_effect",)
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_ini_keys_of_the_wire_fakes(pytester: pytest.Pytester) -> None:
    from killdrill.pytest_plugin import _ini_options

    pytester.makeini(
        "[pytest]\nkilldrill_smtp_fake = true\nkilldrill_hooks =\n    /notify*=naive\n    /tickets=keyed\n"
        "killdrill_hook_key_header = X-Request-Id\n"
    )
    options = _ini_options(pytester.parseconfig())
    assert options["smtp_fake"] is True
    assert options["hooks"] == {"/notify*": "naive", "/tickets": "keyed"}
    assert options["hook_key_header"] == "X-Request-Id"
    DrillOptions(**options)  # every ini key is a DrillOptions field


def test_a_receiver_that_ignores_keys_catches_an_ungated_webhook(tmp_path: Path) -> None:
    # The agent sends a stable key, but this route is naive (a partner that ignores keys): the
    # re-sent notification after the kill is a second delivery, which the agent had to gate.
    options = DrillOptions(
        root=tmp_path, http_fakes=True, smtp_fake=True, discovery_runs=1, hooks={"/notify": "naive"}
    )
    result = Drill(AGENT, options).run_case("during:hooks.post#2")
    (violation,) = result.violations
    assert (violation.kind, violation.provider) == ("duplicate_effect", "hooks"), result.text()
    assert "the provider did not dedupe it" in violation.message
    assert "--hook /notify=naive" in result.text()


def test_a_bad_hook_option_is_a_one_line_usage_error() -> None:
    cmd = [
        sys.executable,
        "-m",
        "killdrill",
        "run",
        "-s",
        "offset:1ms",
        "--hook",
        "/x=sometimes",
        "--",
        "python",
        "-c",
        "0",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "PATTERN=keyed or PATTERN=naive" in out.stderr
