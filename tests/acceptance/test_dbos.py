"""The DBOS integration and the DBOS payout example, on the installed DBOS, killed for real.

Every attempt is a real process with its own SQLite system database under the case's workdir;
a resume is DBOS's own recovery on ``DBOS.launch()``.  Steps run on DBOS's executor threads,
so every drill here also proves that ``killdrill.boundary`` holds and kills from there.  Drills
fork attempts from a template that imported DBOS and the example once (``--launcher fork``),
except the ones that check the spawn path and the version rule.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.integrations import find
from killdrill.integrations.dbos import OUTSIDE_STEP_CAUSE, VERSION_CAUSE, point_name
from tests.cli_support import run_cli
from tests.frameworks import need

need("dbos", "dbos")

EXAMPLE = "killdrill.examples.payout_dbos"
STEPS = ("quote", "charge", "record_invoice", "send_receipt", "update_crm")
FORK: dict[str, Any] = {"launcher": "fork", "preload": ("dbos", EXAMPLE)}


def payout(*extra: str, module: str | None = None) -> list[str]:
    head = ["python", module] if module else ["python", "-m", EXAMPLE]
    return [*head, "--thread", "{thread}", "--workdir", "{workdir}", *extra]


def drill(tmp_path: Path, command: list[str], **options: Any) -> Drill:
    base = DrillOptions(root=tmp_path, integrations=("dbos",), timeout=60, discovery_runs=1)
    return Drill(command, base, **options)


def test_integration_is_registered_and_lazy() -> None:
    """Found by name; activating it in a fresh interpreter imports no DBOS."""
    assert find("dbos").preload == ("dbos", "sqlalchemy")
    code = (
        "import sys; from killdrill.integrations import dbos as d; d.activate(); "
        "print(d.active(), 'dbos' in sys.modules, 'sqlalchemy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "False"]


def test_an_email_sent_in_the_workflow_body_is_said_to_run_outside_a_step(tmp_path: Path) -> None:
    """The record's cause: the calls' runtime context (unit: workflow) says where the send ran."""
    with drill(tmp_path, payout("--bug", "email_in_body"), **FORK) as d:
        case = d.run_case("before:update_crm")
    (v,) = [v for v in case.violations if v.kind == "duplicate_effect"]
    assert v.provider == "mailbox" and v.cause == OUTSIDE_STEP_CAUSE, case.text()
    assert "outside any @DBOS.step" in (v.observed or "") and "workflow payout" in (v.observed or "")
    assert "move the call into a @DBOS.step" in (v.fix or "") and "gate the send" not in (v.fix or "")
    contexts = [c.context for c in v.calls]
    # one workflow (its id is the thread), recovered: the same run, so not work_resubmitted
    ctx = {"runtime": "dbos", "unit": "workflow", "name": "payout", "run": "{thread}"}
    assert contexts == [ctx] * 2, contexts


def test_a_call_in_a_step_carries_the_steps_runtime_context(tmp_path: Path) -> None:
    with drill(tmp_path, payout("--bug", "uuid_key"), **FORK) as d:
        case = d.run_case("after:charge")
    charges = next(v for v in case.violations if v.kind == "duplicate_effect").calls
    assert {(c.context or {}).get("unit") for c in charges} == {"step"}, charges
    assert all(v.cause != OUTSIDE_STEP_CAUSE for v in case.violations), case.text()


def test_point_names() -> None:
    assert point_name("charge") == "charge"
    assert point_name("Payouts.charge") == "Payouts.charge"
    assert point_name("outer.<locals>.charge") == "outer._locals_.charge"
    assert point_name("<temp>.charge") is None  # DBOS's own wrapper around a step started alone


PLAIN_AGENT = """
    # A DBOS agent that imports nothing of killdrill: its points come from the integration.
    import argparse, os
    from dbos import DBOS, SetWorkflowID

    @DBOS.step()
    def fetch(n: int) -> int:
        return n * 2

    @DBOS.step(name="store_total")
    def store(total: int) -> None:
        with open(os.path.join(ARGS.workdir, "total"), "w") as f:
            f.write(str(total))

    @DBOS.workflow()
    def job(n: int) -> int:
        total = sum(fetch(i) for i in range(n))
        store(total)
        return total

    parser = argparse.ArgumentParser()
    parser.add_argument("--thread"); parser.add_argument("--workdir")
    ARGS = parser.parse_args()
    DBOS(config={"name": "plain", "system_database_url": f"sqlite:///{ARGS.workdir}/sys.sqlite"})
    DBOS.launch()
    with SetWorkflowID(ARGS.thread):
        print(DBOS.start_workflow(job, 3).get_result())
    DBOS.destroy()
"""


def test_points_of_an_agent_that_imports_no_killdrill(tmp_path: Path) -> None:
    agent = tmp_path / "plain_agent.py"
    agent.write_text(textwrap.dedent(PLAIN_AGENT))
    assert "killdrill" not in agent.read_text().replace("imports nothing of killdrill", "")
    cmd = ["python", str(agent), "--thread", "{thread}", "--workdir", "{workdir}"]
    proc = run_cli(tmp_path, "points", "--integration", "dbos", "--root", str(tmp_path / "r"), "--", *cmd)
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines()]
    listed = [r[1] for r in rows if len(r) > 2 and r[0].isdigit() and ":" in r[1]]
    expected = ["before:job"]
    for occurrence in ("", "#2", "#3"):
        expected += [f"before:fetch{occurrence}", f"after:fetch{occurrence}", f"committed:fetch{occurrence}"]
    expected += ["before:store_total", "after:store_total", "committed:store_total"]
    expected += ["after:job", "committed:job"]
    assert listed == expected, proc.stdout


def test_forgotten_integration_is_named_in_one_line(tmp_path: Path) -> None:
    proc = run_cli(
        tmp_path, "points", "--discovery-runs", "1", "--root", str(tmp_path / "r"), "--", *payout()
    )
    assert proc.returncode == 0, proc.stderr
    hints = [ln for ln in proc.stderr.splitlines() if "imports dbos" in ln]
    assert len(hints) == 1 and "--integration dbos" in hints[0], proc.stderr


def test_correct_example_passes_where_a_kill_hurts(tmp_path: Path) -> None:
    """Per push: every after: and during: point (where a kill re-runs work) and every committed:
    of a step; the whole catalogue runs 20 times under -m slow."""
    d = drill(tmp_path, payout(), **FORK)
    catalogue = d.points()
    for step in STEPS:
        assert {f"before:{step}", f"after:{step}", f"committed:{step}"} <= set(catalogue), catalogue
    assert catalogue[0] == "before:payout" and catalogue[-2:] == ["after:payout", "committed:payout"]
    sample = [p for p in catalogue if p.split(":")[0] in ("after", "during") or p.startswith("committed:c")]
    started = time.monotonic()
    result = d.run_all(sample)
    per_case = (time.monotonic() - started) / len(result.cases)
    print(f"dbos drill, fork launcher: {len(result.cases)} cases, {per_case:.2f} s per case")
    assert len(result.cases) == len(sample)
    failed = [c for c in result.cases if not c.ok]
    assert not failed, "\n\n".join(c.text() for c in failed)


def test_resume_replays_recorded_steps_and_says_so(tmp_path: Path) -> None:
    """A kill after the charge committed: the resume re-enters the workflow, replays quote and
    charge from their records (no new before:), runs the rest, and says what it replayed."""
    with drill(tmp_path, payout(), keep=True) as d:  # spawn: the bootstrap in a fresh interpreter
        result = d.run_case("committed:charge")
    assert result.ok, result.text()
    second = [e.label for e in result.attempts[1].trace]
    assert second[:2] == ["before:payout", "before:record_invoice"], second
    assert not any(p.split("#")[0] in ("before:quote", "before:charge") for p in second)
    stderr = (Path(result.workdir) / ".killdrill" / "attempt-2.stderr").read_text()
    assert "killdrill: dbos: replayed step quote" in stderr and "replayed step charge" in stderr


BUG_CASES = {
    "uuid_key": {"during:payments.charge": {"duplicate_effect", "key_changed"},
                 "after:charge": {"duplicate_effect", "key_changed"}, "committed:charge": set()},
    "clock_key": {"during:payments.charge": {"duplicate_effect", "key_changed"},
                  "after:charge": {"duplicate_effect", "key_changed"}, "committed:charge": set()},
    "email_then_work": {"during:mailbox.send": {"duplicate_effect"}, "during:kv.set#2": {"duplicate_effect"},
                        "after:send_receipt": {"duplicate_effect"}, "committed:send_receipt": set()},
}  # fmt: skip


@pytest.mark.parametrize(
    "bug",  # clock_key has uuid_key's shape (a key new per attempt): it runs under -m slow
    [pytest.param(b, marks=[pytest.mark.slow] if b == "clock_key" else []) for b in sorted(BUG_CASES)],
)
def test_each_bug_is_caught_at_its_points(tmp_path: Path, bug: str) -> None:
    with drill(tmp_path, payout("--bug", bug), **FORK) as d:
        for schedule, kinds in BUG_CASES[bug].items():
            result = d.run_case(schedule)
            assert result.attempts[0].killed_at == schedule, result.text()
            if not kinds:
                assert result.ok, f"{schedule}:\n{result.text()}"
                continue
            assert kinds <= set(result.kinds), f"{schedule}:\n{result.text()}"
            dup = next(v for v in result.violations if v.kind == "duplicate_effect")
            provider = "mailbox" if bug == "email_then_work" else "payments"
            assert dup.provider == provider and len(dup.calls) == 2
            assert sorted(c.attempt for c in dup.calls) == [1, 2]  # the ledger's own calls


def _v2(tmp_path: Path) -> str:
    """The example with a comment added to the workflow body: another application version."""
    import killdrill.examples.payout_dbos as example

    source = Path(example.__file__).read_text()
    anchor = "    amount = quote(account, cycle)\n"
    assert anchor in source
    upgraded = tmp_path / "payout_v2.py"
    upgraded.write_text(source.replace(anchor, "    # v2: reviewed\n" + anchor))
    return str(upgraded)


@pytest.mark.slow  # ~16 s: two versions of the app; the per-push upgrade test is test_fleet's
def test_upgrade_that_changes_the_workflow_names_the_version_rule(tmp_path: Path) -> None:
    """DBOS recovers only its own application version: the resumed v2 never picks the workflow
    up and waits for it forever; the drill says why instead of a bare hang."""
    v2 = _v2(tmp_path)
    with drill(tmp_path / "unpinned", payout(), resume_with=payout(module=v2), timeout=12) as d:
        result = d.run_case("after:charge")
    assert "hang" not in result.kinds and "resume_failed" in result.kinds, result.text()
    failed = next(v for v in result.violations if v.kind == "resume_failed")
    assert failed.detail["cause"] == VERSION_CAUSE
    assert "application version" in failed.message and "application_version" in failed.message


def test_upgrade_with_a_pinned_version_resumes(tmp_path: Path) -> None:
    v2 = _v2(tmp_path)
    pin = ("--app-version", "payout-1")
    with drill(tmp_path, payout(*pin), resume_with=payout(*pin, module=v2)) as d:
        result = d.run_case("after:charge")
    assert result.ok, result.text()


@pytest.mark.slow
def test_correct_example_passes_every_point_20_times(tmp_path: Path) -> None:
    repeat = int(os.environ.get("KILLDRILL_DBOS_REPEAT", "20"))
    d = drill(tmp_path, payout(), **FORK)
    for round_ in range(repeat):
        result = d.run_all()
        failed = [c for c in result.cases if not c.ok]
        assert not failed, f"round {round_ + 1}:\n" + "\n\n".join(c.text() for c in failed)
