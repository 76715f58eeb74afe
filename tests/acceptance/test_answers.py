"""``--answer``: the drill's scripted human answers LangGraph interrupts, killed and resumed for real.

The two-review agent (``tests/agents/basic/two_reviews.py``) charges the first answer and files the
second: each case's ledger says which answer reached which question after the kill.  The bundled
hotel-review example (LangGraph's review-tool-calls example) is drilled correct and with its
planted unkeyed booking (slow: it imports langchain_openai in every attempt).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.examples import HOTEL_REVIEW, HOTEL_REVIEW_SCRIPT
from killdrill.options import OptionError
from killdrill.records import CaseResult

pytest.importorskip("langgraph")

AGENT = str(Path(__file__).parents[1] / "agents" / "basic" / "two_reviews.py")
TWO_REVIEWS = ["python", AGENT, "--thread", "{thread}", "--db", "{workdir}/ckpt.sqlite"]
ANSWERS = ("4200", '"ship it"')
FORK: dict[str, Any] = {"launcher": "fork", "preload": ("langgraph.graph", "langgraph.checkpoint.sqlite")}


def drill(tmp_path: Path, command: list[str], **options: Any) -> Drill:
    base = DrillOptions(root=tmp_path, integrations=("langgraph",), timeout=60, discovery_runs=1)
    return Drill(command, base, **options)


def effects(result: CaseResult) -> list[tuple[str, dict[str, Any]]]:
    """The calls that did something, in order: a replay (same key, same payload) is left out, since
    LangGraph saves a node's writes in the background while the next node may already run, so a
    kill at ``committed:ask_amount`` may or may not find the charge made (its resume then replays
    it); a wrong answer would still show, as another payload (refused under the same key)."""
    assert result.ledger is not None
    return [
        (f"{c.provider}.{c.op}", dict(c.payload))
        for c in result.ledger.calls
        if c.provider != "model" and not c.replayed
    ]


def test_answers_reach_their_interrupts_in_order_across_kills(tmp_path: Path) -> None:
    """A kill after an answer was handed over and before LangGraph saved it brings the same
    interrupt back: it gets the same answer, and the next question still gets the next one."""
    with drill(tmp_path, TWO_REVIEWS, answer=ANSWERS, **FORK) as d:
        baseline = [(f"{c.provider}.{c.op}", c.payload) for c in d.discover().baseline.calls]
        assert baseline == [
            ("payments.charge", {"order": "A-17", "amount": 4200}),
            ("tickets.create", {"order": "A-17", "note": "ship it"}),
        ]
        # ask_amount#2 / ask_note#2: the resumed question, its answer handed over, not yet saved.
        for schedule in ("before:ask_amount#2", "before:ask_note#2", "committed:ask_amount"):
            result = d.run_case(schedule)
            assert result.ok, result.text()
            assert result.attempts[0].killed_at == schedule
            assert effects(result) == baseline, result.text()


@pytest.mark.slow
def test_a_driver_that_resends_its_input_on_resume_is_caught(tmp_path: Path) -> None:
    """Its input starts a new run on a resume (LangGraph discards the pending tasks): ``--answer``
    does not turn it into the resume, so the re-asked amount question meets the note's answer (the
    resume crashes) and the drill reports the driver's mistake, as a crash in production shows it."""
    with drill(tmp_path, [*TWO_REVIEWS, "--resend"], answer=ANSWERS, **FORK) as d:
        result = d.run_case("before:charge")
    assert result.kinds == ("missing_effect",), result.text()
    assert "invalid literal for int() with base 10: 'ship it'" in result.text()


def test_async_runs_are_answered_too(tmp_path: Path) -> None:
    with drill(tmp_path, [*TWO_REVIEWS, "--async"], answer=ANSWERS, **FORK) as d:
        result = d.run_case("before:ask_note#2")
        assert result.ok, result.text()
        assert effects(result)[-1] == ("tickets.create", {"order": "A-17", "note": "ship it"})


def test_a_run_stopped_at_an_unanswered_interrupt_is_one_line(tmp_path: Path) -> None:
    with drill(tmp_path, TWO_REVIEWS, **FORK) as d, pytest.raises(OptionError) as none:
        d.discover()
    text = str(none.value)
    assert "\n" not in text and "'ask_amount'" in text and "amount for the order?" in text
    assert text.endswith("with answer=")  # named as the caller spelled it (a keyword here)
    with drill(tmp_path, TWO_REVIEWS, answer=ANSWERS[:1], **FORK) as d, pytest.raises(OptionError) as short:
        d.discover()
    assert "'ask_note'" in str(short.value) and "after the 1 answer given" in str(short.value)


def killdrill_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "killdrill", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("integration", "said"),
    [
        ((), "--answer needs an integration that answers interrupts through its framework: "),
        (("--integration", "celery"), "--answer: the celery integration cannot answer"),
    ],
)
def test_answer_without_an_answering_integration_is_one_line(integration: tuple[str, ...], said: str) -> None:
    done = killdrill_cli("drill", *integration, "--answer", "yes", "--", "python", "-c", "pass")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "langgraph" in lines[0], done.stderr


# ------------------------------------------------------------------ the OpenAI Agents SDK

REFUND = str(Path(__file__).parents[1] / "agents" / "basic" / "refund_approval_agents")
REFUND_CMD = ["python", f"{REFUND}.py", "--thread", "{thread}", "--db", "{workdir}/session.sqlite"]


def agents_drill(tmp_path: Path, **options: Any) -> Drill:
    pytest.importorskip("agents")
    base = DrillOptions(
        root=tmp_path,
        integrations=("openai_agents",),
        timeout=60,
        discovery_runs=1,
        model_script=f"{REFUND}.yaml",
        launcher="fork",
        preload=("agents",),
    )
    return Drill(REFUND_CMD, base, **options)


def test_agents_sdk_approval_is_answered_and_survives_a_kill(tmp_path: Path) -> None:
    """The documented loop's ``input()`` is never reached: the integration approves the pending
    ``needs_approval`` tool; killed as the approved tool runs, the resumed run is approved again."""
    with agents_drill(tmp_path, answer=("approve",)) as d:
        for schedule in ("before:refund", "during:payments.charge"):
            result = d.run_case(schedule)
            assert result.ok, result.text()
            landed = effects(result)  # a resume's call with the same key is a replay, kept in the ledger
            assert landed and all(e == ("payments.charge", {"order": "R-9", "amount": -1500}) for e in landed)


def test_agents_sdk_unanswered_approval_is_one_line(tmp_path: Path) -> None:
    with agents_drill(tmp_path) as d, pytest.raises(OptionError) as err:
        d.discover()  # the driver's input() meets no person: named, not its EOFError traceback
    text = str(err.value)
    assert "\n" not in text and "tool 'refund' asks" in text and '"order_id": "R-9"' in text


# ------------------------------------------------------------------ the bundled example


def hotel(tmp_path: Path, *, naive: bool, **options: Any) -> Drill:
    env = {"PYTHONWARNINGS": "ignore"}
    fork = {"launcher": "fork", "preload": ("langchain_openai", "langgraph.checkpoint.sqlite")}
    command = [*HOTEL_REVIEW, "--naive"] if naive else list(HOTEL_REVIEW)
    return drill(tmp_path, command, model_script=HOTEL_REVIEW_SCRIPT, env=env, **fork, **options)


@pytest.mark.slow
def test_hotel_review_example_unkeyed_booking_is_caught_and_the_keyed_one_passes(tmp_path: Path) -> None:
    approve = ('{"action": "continue"}',)
    with hotel(tmp_path / "naive", naive=True, answer=approve) as d:
        for schedule in ("after:run_tool", "during:tickets.create"):
            result = d.run_case(schedule)
            assert result.kinds == ("duplicate_effect",), result.text()
    with hotel(tmp_path / "keyed", naive=False, answer=approve) as d:
        for schedule in ("after:run_tool", "during:tickets.create", "before:human_review_node#2"):
            result = d.run_case(schedule)
            assert result.ok, result.text()


@pytest.mark.slow
def test_hotel_review_example_without_an_answer_names_the_review(tmp_path: Path) -> None:
    with hotel(tmp_path, naive=False) as d, pytest.raises(OptionError) as err:
        d.discover()
    assert "'human_review_node'" in str(err.value) and "Is this correct?" in str(err.value)


def test_example_constants_point_at_files() -> None:
    assert os.path.exists(HOTEL_REVIEW_SCRIPT)
