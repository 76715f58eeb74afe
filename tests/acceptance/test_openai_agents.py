"""The OpenAI Agents SDK, unedited, on its default Responses API against the model fake: the
integration's points, real kills and resumes, the planted bugs caught with the expected kinds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.examples import (
    BILLING_OPENAI_AGENTS,
    BILLING_OPENAI_AGENTS_ENV,
    BILLING_OPENAI_AGENTS_PRELOAD,
    BILLING_OPENAI_AGENTS_SCRIPT,
)
from tests.frameworks import need
from tests.repeated import Catch, catch_every_time, pass_every_round, repeat, workers

need("openai-agents", "agents", "stripe", "aiosmtpd")

POINTS = [
    "committed:session",
    "during:model.responses",
    "before:charge_card",
    "during:payments.charge",
    "after:charge_card",
    "committed:charge_card",
    "committed:session#2",
    "during:model.responses#2",
    "before:send_receipt",
    "during:mailbox.send",
    "after:send_receipt",
    "committed:send_receipt",
    "committed:session#3",
    "during:model.responses#3",
    "committed:session#4",
]


def _drill(
    tmp_path: Path,
    *args: str,
    variance: int | None = None,
    integration: bool = True,
    launcher: str = "fork",
    workers: int = 1,
) -> Drill:
    options = DrillOptions(
        root=tmp_path,
        http_fakes=True,
        smtp_fake=True,
        env=BILLING_OPENAI_AGENTS_ENV,
        integrations=("openai_agents",) if integration else (),
        model_script=BILLING_OPENAI_AGENTS_SCRIPT,
        model_variance=variance,
        launcher=launcher,
        preload=BILLING_OPENAI_AGENTS_PRELOAD if launcher == "fork" else (),
        timeout=60,
        discovery_runs=1,
        workers=workers,
    )
    return Drill([*BILLING_OPENAI_AGENTS, *args], options)


def test_activation_does_not_import_the_sdk() -> None:
    code = (
        "import sys; from killdrill.integrations import openai_agents as oa; oa.activate(); "
        "import os; assert 'agents' not in sys.modules and oa.active(); "
        "print(os.environ['OPENAI_AGENTS_DISABLE_TRACING'])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr


def test_points_are_named_after_the_tools_and_the_correct_agent_passes_under_variance(tmp_path: Path) -> None:
    with _drill(tmp_path, variance=5) as drill:
        assert drill.discover().labels() == POINTS
        points = ("after:charge_card", "after:send_receipt", "committed:charge_card")
        cases = [drill.run_case(point) for point in points]
    for case in cases:
        assert case.ok, case.text()
    # a kill after the tool returned, before the session's save, asks the model again
    assert cases[0].model["respent_calls"] == 1


def test_tool_call_id_key_is_caught_without_a_flag_and_names_the_models_id(tmp_path: Path) -> None:
    """``ToolContext.tool_call_id`` as the key: the resume asks the model again and gets a new call
    id, as from any model, so the charge lands twice; the cause names the ids the model issued."""
    with _drill(tmp_path, "--bug", "call-id-key") as drill:
        case = drill.run_case("after:charge_card")
    assert case.kinds == ("duplicate_effect", "key_changed"), case.text()
    assert case.ledger is not None
    charges = [c for c in case.ledger.calls if c.provider == "payments"]  # the ledger itself, read
    assert [c.attempt for c in charges] == [1, 2] and charges[0].key != charges[1].key
    assert case.violations[0].cause == "model_id_key"
    assert f"{charges[1].key} in attempt 2" in case.violations[0].observed


def test_ungated_receipt_is_sent_twice_without_variance(tmp_path: Path) -> None:
    with _drill(tmp_path, "--bug", "receipt-ungated") as drill:
        case = drill.run_case("after:send_receipt")
    assert case.kinds == ("duplicate_effect",), case.text()


def test_the_hint_names_the_integration_when_the_agent_imports_agents(tmp_path: Path) -> None:
    hint = "imports agents but the openai_agents integration is off.*--integration openai_agents"
    # spawned: a fork template that preloaded the SDK would import it before any case's watch
    drill = _drill(tmp_path, integration=False, launcher="spawn")
    with drill, pytest.warns(UserWarning, match=hint):
        drill.discover()


@pytest.mark.slow
def test_correct_example_passes_every_point_20_times(tmp_path: Path) -> None:
    """Every point, 20 rounds, no false alarm (KILLDRILL_OPENAI_AGENTS_REPEAT=N rounds)."""
    with _drill(tmp_path, workers=workers()) as d:
        assert d.points() == POINTS
        pass_every_round(d, int(os.environ.get("KILLDRILL_OPENAI_AGENTS_REPEAT", "20")))


BUG_CASES: dict[str, tuple[int | None, dict[str, Catch]]] = {
    # the model fake's call ids differ on every answer, as any model's: caught with no flag
    "call-id-key": (None, {
        "after:charge_card": Catch(("duplicate_effect", "key_changed"), "payments"),
        "during:payments.charge": Catch(("duplicate_effect", "key_changed"), "payments"),
    }),
    "receipt-ungated": (None, {
        "after:send_receipt": Catch(("duplicate_effect",), "mailbox"),
        "during:mailbox.send": Catch(("duplicate_effect",), "mailbox"),
    }),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUG_CASES))
def test_each_planted_bug_is_caught_at_its_points_every_time(tmp_path: Path, bug: str) -> None:
    """Each point KILLDRILL_BUG_REPEAT times (10): the expected kinds on the expected provider."""
    variance, cases = BUG_CASES[bug]
    with _drill(tmp_path, "--bug", bug, variance=variance) as d:
        catch_every_time(d, cases, repeat())
