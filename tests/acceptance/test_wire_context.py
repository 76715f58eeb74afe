"""The runtime context travels with calls over the wire (HTTP fakes, SMTP, MCP), so the causes
that read it name an effect sent over the wire exactly as one made in process: unmodified agents
(the stripe SDK, ``smtplib``, ``requests``, the MCP SDK) under an integration, killed for real."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.integrations.dbos import OUTSIDE_STEP_CAUSE
from tests.cli_support import run_cli
from tests.frameworks import need

need("dbos", "dbos")
_missing = [m for m in ("aiosmtpd", "requests", "stripe") if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(f"needs {', '.join(_missing)}", allow_module_level=True)

REFUND = str(Path(__file__).parents[1] / "agents" / "wire" / "refund_dbos.py")


def refund_drill(tmp_path: Path, *extra: str) -> Drill:
    options = DrillOptions(
        root=tmp_path,
        integrations=("dbos",),
        http_fakes=True,
        smtp_fake=True,
        timeout=60,
        discovery_runs=1,
        launcher="fork",
        preload=("dbos", "stripe", "requests"),
    )
    command = ["python", REFUND, "--order", "o-{thread}", "--workdir", "{workdir}", *extra]
    return Drill(command, options)


def _step(name: str) -> dict[str, Any]:
    return {"runtime": "dbos", "unit": "step", "name": name}


def test_a_refund_over_the_stripe_sdk_records_its_steps_context(tmp_path: Path) -> None:
    with refund_drill(tmp_path) as d:
        case = d.run_case("after:refund")
    assert case.ok, case.text()
    calls = case.ledger.calls if case.ledger else []
    charges = [c for c in calls if c.provider == "payments"]
    assert charges and all(c.context and _step("refund").items() <= c.context.items() for c in charges)
    (mail,) = [c for c in calls if c.provider == "mailbox"]
    assert mail.context and _step("receipt").items() <= mail.context.items(), mail


def test_a_second_workflow_started_by_a_re_run_is_work_resubmitted(tmp_path: Path) -> None:
    """The workflow's id is new per run: the re-run starts a second refund beside the recovered
    first, under another key.  Over HTTP it was named ``key_new_per_call``."""
    with refund_drill(tmp_path, "--bug", "new_id") as d:
        case = d.run_case("after:refund")
    refunds = [v for v in case.violations if v.provider == "payments"]
    assert refunds, case.text()
    assert all(v.cause == "work_resubmitted" for v in refunds), case.text()
    runs = {(c.context or {}).get("run") for v in refunds for c in v.calls if c.landed}
    assert len(runs) == 2, case.text()


@pytest.mark.parametrize(
    ("mail", "provider"), [("smtp", "mailbox"), pytest.param("http", "hooks", marks=pytest.mark.slow)]
)
def test_a_receipt_sent_from_the_workflow_body_is_effect_outside_step(
    tmp_path: Path, mail: str, provider: str
) -> None:
    """DBOS recovers the workflow and re-runs its body: the receipt sent there, over SMTP or a
    mail API over HTTP, goes again.  Over the wire it was named ``unkeyed_resent``."""
    with refund_drill(tmp_path, "--bug", "email_in_body", "--mail", mail) as d:
        case = d.run_case("before:close_case")
    (v,) = [v for v in case.violations if v.provider == provider]
    assert v.kind == "duplicate_effect" and v.cause == OUTSIDE_STEP_CAUSE, case.text()
    assert "workflow refund_workflow" in (v.observed or ""), case.text()
    ctx = {"runtime": "dbos", "unit": "workflow", "name": "refund_workflow", "run": "o-{thread}"}
    assert [c.context for c in v.calls] == [ctx, ctx], case.text()


BOOK = str(Path(__file__).parents[1] / "agents" / "wire" / "book_dbos_mcp.py")


@pytest.mark.parametrize(
    "transport",
    ["stdio", pytest.param("http", marks=pytest.mark.slow), pytest.param("proxy", marks=pytest.mark.slow)],
)
def test_an_mcp_tool_call_records_its_steps_context(tmp_path: Path, transport: str) -> None:
    """Over stdio the call's ``_meta`` carries the context (to the counting server and to the
    proxy, which records the user's server's tool); over HTTP the request's header does."""
    pytest.importorskip("mcp")
    options = DrillOptions(
        root=tmp_path,
        integrations=("dbos",),
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
        launcher="fork",
        preload=("dbos", "mcp"),
    )
    command = ["python", BOOK, "--order", "o-{thread}", "--workdir", "{workdir}", "--transport", transport]
    with Drill(command, options) as d:
        case = d.run_case("after:book")
    provider = "hotel" if transport == "proxy" else "tickets"
    calls = [c for c in (case.ledger.calls if case.ledger else []) if c.provider == provider]
    ctx = {**_step("book"), "run": "o-{thread}"}
    assert len(calls) == 2 and all(c.context == ctx for c in calls), case.text()


APP = str(Path(__file__).parents[1] / "agents" / "wire" / "refund_app.py")


@pytest.mark.parametrize(
    "bug",
    [pytest.param([], id="correct", marks=pytest.mark.slow), pytest.param(["--bug", "new_id"], id="new_id")],
)
def test_a_fastapi_refund_service_as_deployed(tmp_path: Path, bug: list[str]) -> None:
    """A FastAPI refund service: a client's re-sent POST starts a second refund workflow (its id new
    per request), the refund sent with the stripe SDK: ``work_resubmitted``, never
    ``key_new_per_call``; the correct app attaches the re-sent POST to the recovered workflow."""
    pytest.importorskip("fastapi")
    app = f"app=python {APP} --port {{port}} --workdir {{workdir}} {' '.join(bug)}".strip()
    client = ["python", "-m", "killdrill.examples.outbox_client", "--url", "http://127.0.0.1:{port}"]
    out = run_cli(
        tmp_path, "run", "--schedule", "app:during:payments.charge", "--discovery-runs", "1",
        "--root", str(tmp_path / "w"), "--integration", "dbos", "--http-fakes", "--timeout", "120",
        "--serve", app, "--", *client, "--order", "{thread}",
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == (1 if bug else 0), text
    if bug:
        assert "payments.charge" in text and "cause: work_resubmitted" in text, text
        assert "key_new_per_call" not in text and "key_new_per_attempt" not in text, text
        assert "made by dbos step refund" in text, text
