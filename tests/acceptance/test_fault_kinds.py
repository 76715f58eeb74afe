"""A fault kind of the grammar (``KIND[=TARGET]:TRIGGER``) in a deployment: the case lands it on
the process that reaches its trigger, and the kind's nemesis, built then, acts there and names its
target among the deployment's processes.  The kind is the test kind ``mark`` of
tests/unit/faults/test_kinds.py (declared in-process by importing it)."""

from __future__ import annotations

from pathlib import Path

from killdrill.drill import Drill, DrillOptions
from tests.unit.faults import test_kinds  # noqa: F401 - declares the kind ``mark``

DEPLOY = Path(__file__).parent.parent / "agents" / "deploy"
WORKER = f"python {DEPLOY / 'worker.py'} --queue {{workdir}}/q --name w{{replica}}"
SUBMIT = ["python", str(DEPLOY / "submit.py"), "--queue", "{workdir}/q", "--task", "{thread}"]


def test_a_kind_of_the_grammar_lands_on_the_deployed_process_that_reaches_its_trigger(tmp_path: Path) -> None:
    options = DrillOptions(root=tmp_path, discovery_runs=1, serve={"worker": WORKER})
    with Drill(SUBMIT, options) as drill:
        case = drill.run_case("mark=blue:worker:after:ship")
    assert case.ok, case.text()
    (worker,) = [a for a in case.attempts if a.process == "worker" and a.kill is not None]
    assert worker.kill == "mark=blue:worker:after:ship"
    assert "mark blue at after:ship" in worker.notes  # its nemesis acted, at the occurrence counted
    assert worker.outcome == "drained" and all(a.killed_at is None for a in case.attempts)
