"""A fault kind is one module plus its grammar entry: tests/unit/faults/mark_kind.py is such a
module, the kind ``mark`` (``mark[=TAG]:TRIGGER``: note TAG on the launch that reaches the
trigger, then let it go), and the tests check that the grammar parses and prints it with its
target and trigger apart, that the table of kinds finds its nemesis through the grammar entry
alone, that a case's step arms it, and that a real supervisor routes a real agent's point to it
while the kill family's own forms parse, print and act as before.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from killdrill import points
from killdrill.errors import UsageError
from killdrill.faults import kinds
from killdrill.faults.kill import Kill
from killdrill.faults.kinds import Scene
from killdrill.points import Fault, FaultGrammar, ScheduleError, parse_fault, parse_schedule
from killdrill.process.attempts import LaunchSpec
from killdrill.process.supervisor import Supervisor
from killdrill.records import EXITED, KILLED, POINT_NOT_REACHED
from tests.unit.faults.mark_kind import GRAMMAR, KIND, Mark

AGENT = """
import killdrill
for name in ("a", "b", "a"):
    killdrill.boundary("before:" + name)
"""


@pytest.mark.parametrize(
    "text",
    ["mark:before:a", "mark=blue:before:a#2", "mark=blue:worker:before:a+3.5ms", "mark=x:worker[1]:after:b"],
)
def test_a_kind_of_the_grammar_parses_and_prints_back_with_target_and_trigger_apart(text: str) -> None:
    fault = parse_fault(text)
    assert str(fault) == text and parse_fault(str(fault)) == fault
    assert fault.acts == "mark" and not fault.is_kill and fault.point is not None


def test_target_and_trigger_are_named_separately() -> None:
    fault = parse_fault("mark=blue:worker:before:a#2")
    assert (fault.action, fault.target, fault.process, fault.point, fault.occurrence) == (
        "mark", "blue", "worker", "before:a", 2
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("mark:offset:2s", "triggered at a point"),
        ("mark:pause:before:a", "a point or a time as TRIGGER"),
        ("mark=t:before:a~1s", "a point or a time as TRIGGER"),
        ("marc=t:before:a", "unknown fault kind 'marc' (did you mean mark?)"),
        ("mark:bogus:x", "after mark:"),
    ],
)
def test_a_bad_fault_of_the_grammar_is_one_line_naming_it(text: str, why: str) -> None:
    with pytest.raises(ScheduleError) as err:
        parse_fault(text)
    assert err.value.text == text and why in str(err.value)


def test_the_kill_familys_forms_are_unchanged() -> None:
    text = "api:before:x,worker[1]:offset:2000ms,start+12.5%,before:x#2+3.5ms,before:x~5000ms"
    text += ",pause:after:x@before:y#2,drop:payments.charge#2~1000ms,reset:payments.charge"
    sched = parse_schedule(text)
    assert str(sched) == text
    assert [f.acts for f in sched] == ["kill", "kill", "kill", "kill", "hold", "pause", "drop", "reset"]
    assert all(f.action is None and f.target is None for f in sched)


def test_a_grammar_word_is_declared_once() -> None:
    assert points.declare(GRAMMAR) is GRAMMAR  # the same entry again: a no-op
    for clash in (FaultGrammar("mark", module="elsewhere"), FaultGrammar("pause", module="elsewhere")):
        with pytest.raises(UsageError, match="already declared"):
            points.declare(clash)


def test_the_table_finds_the_kind_through_its_grammar_entry_and_a_step_arms_it() -> None:
    assert kinds.kind_of(parse_fault("mark:before:a")) is KIND
    assert {"kill", "hold", "pause", "drop", "reset", "mark"} <= set(kinds.kinds())
    made: list[LaunchSpec] = []

    def make(number: int, fault: Fault | None) -> LaunchSpec:
        made.append(_spec(Path("."), number, fault))
        return made[-1]

    step = kinds.step(parse_schedule("before:a,mark=t:before:b"), 2, make, Scene())
    assert step.specs == made and step.numbers == 1
    (nemesis,) = step.faults
    assert isinstance(nemesis, Mark) and nemesis.spec is made[0] and nemesis.fault.target == "t"
    assert isinstance(kinds.step(parse_schedule("before:a"), 1, make, Scene()).faults[0], Kill)
    assert kinds.step(parse_schedule("before:a"), 2, make, Scene()).faults == []  # runs free


@pytest.mark.parametrize(
    ("fault", "outcome", "note"),
    [
        ("mark=blue:before:a#2", EXITED, "mark blue at before:a#2"),
        ("mark:before:c", POINT_NOT_REACHED, None),
        ("before:b", KILLED, None),
    ],
)
def test_a_supervisor_routes_a_real_agents_points_to_the_cases_nemeses(
    tmp_path: Path, fault: str, outcome: str, note: str | None
) -> None:
    spec = _spec(tmp_path, 1, parse_fault(fault))
    attempt = Supervisor(faults=kinds.nemeses([spec], Scene())).run(spec)
    assert attempt.outcome == outcome, attempt
    assert (note in attempt.notes) if note else not any(n.startswith("mark") for n in attempt.notes)
    if outcome == KILLED:
        assert attempt.killed_at == "before:b" and [e.label for e in attempt.trace][-1] == "before:b"
    else:
        assert [e.label for e in attempt.trace] == ["before:a", "before:b", "before:a#2"]


def _spec(root: Path, number: int, fault: Fault | None) -> LaunchSpec:
    state = root / ".killdrill"
    state.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(
        argv=[sys.executable, "-c", AGENT],
        env={"PYTHONPATH": str(Path(points.__file__).parents[1])},
        cwd=None,
        stdout_path=str(state / f"a{number}.out"),
        stderr_path=str(state / f"a{number}.err"),
        number=number,
        fault=fault,
        timeout_s=30,
        control_dir=str(state / "ctl"),
    )
