"""The scripted human's bookkeeping: answers decoded, handed out in order, kept per interrupt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from killdrill.integrations import _answers
from killdrill.integrations.openai_agents.answers import decision
from killdrill.options import DrillOptions, OptionError, by_field
from killdrill.options.reproduce import reproduce_args


@pytest.fixture
def answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KILLDRILL_WORKDIR", str(tmp_path))
    monkeypatch.setenv(_answers.ANSWERS_ENV, json.dumps(["4200", '{"action": "continue"}', "yes"]))
    return tmp_path / ".killdrill" / _answers.FILE


def test_an_answer_is_its_json_value_or_its_text() -> None:
    assert _answers.decode('{"action": "continue"}') == {"action": "continue"}
    assert _answers.decode("true") is True and _answers.decode("3") == 3
    assert _answers.decode("yes") == "yes" and _answers.decode('"true"') == "true"


def test_each_interrupt_keeps_its_answer_and_new_ones_take_the_next(answers: Path) -> None:
    assert _answers.answers_for(["a"]) == [4200]
    assert _answers.answers_for(["a"]) == [4200]  # the same interrupt after a kill: the same answer
    assert json.loads(answers.read_text()) == {"answered": ["a"]}  # on disk before it was handed over
    assert _answers.answers_for(["b", "c"]) == [{"action": "continue"}, "yes"]
    assert not _answers.can_answer(["d"]) and _answers.answers_for(["d"]) is None
    assert _answers.can_answer(["b"]) and _answers.answers_for(["c"]) == ["yes"]


def test_no_answers_given_answers_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILLDRILL_WORKDIR", str(tmp_path))
    monkeypatch.delenv(_answers.ANSWERS_ENV, raising=False)
    assert not _answers.configured() and _answers.answers_for(["a"]) is None


def test_a_question_with_no_answer_left_is_said_on_stderr(
    answers: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from killdrill.integrations.crewai.answers import wrap_request
    from killdrill.integrations.dbos.answers import wrap_recv_setup
    from killdrill.integrations.temporal.answers import _answer

    assert _answers.answers_for(["a", "b", "c"]) is not None  # the three answers given are used up

    class Flow:
        flow_id = "f1"

    class SystemDatabase:
        def check_operation_execution(self, *args: object) -> None:
            return None

    assert wrap_request(lambda self, **kw: "typed")(Flow(), method_name="review") == "typed"
    wrap_recv_setup(lambda *args: None)(SystemDatabase(), "wf1", 3, 4, "approval")
    _answer("wf2", "run1", 2, ["approve"], (None, None))
    assert capsys.readouterr().err.splitlines() == [
        "killdrill: crewai: @human_feedback of review asks with no --answer left (3 given)",
        "killdrill: dbos: recv('approval') of workflow wf1 waits with no --answer left (3 given)",
        "killdrill: temporal: workflow wf2 waits (wait #2) with no --answer left (3 given)",
    ]


def test_an_approval_answer_approves_or_rejects() -> None:
    assert decision(True) == (True, None) and decision("approve") == (True, None)
    assert decision("N") == (False, None) and decision(False) == (False, None)
    assert decision({"approve": False, "message": "over budget"}) == (False, "over budget")
    with pytest.raises(ValueError, match="expected true/approve or false/reject"):
        decision("maybe")


def test_answer_option_keeps_order_and_repeats_in_every_spelling() -> None:
    opts = DrillOptions(answer=["yes", {"action": "continue"}, "yes"])
    assert opts.answer == ("yes", '{"action": "continue"}', "yes")
    assert DrillOptions(answer="no").answer == ("no",)
    again = ["--answer", "yes", "--answer", '{"action": "continue"}', "--answer", "yes"]
    assert reproduce_args(opts) == again
    row = by_field("answer")
    assert row.flag == "--answer" and row.ini == "killdrill_answer" and row.kind.ini_type == "linelist"
    assert row.kind.from_items(["1", "  two "]) == ("1", "  two ")  # as given: JSON ignores the blanks
    with pytest.raises(OptionError, match=r"^answer=: expected answers"):
        DrillOptions(answer=[object()])
