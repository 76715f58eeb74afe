"""The bundled settlement example under real kills: the correct form is exactly-once at every
point and at millisecond offsets; each planted bug is caught with the documented kind."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.examples import SETTLEMENT

if TYPE_CHECKING:
    from tests.conftest import SharedDiscoveries

CMD = list(SETTLEMENT)


def test_correct_example_passes_every_point(tmp_path: Path, shared_discovery: SharedDiscoveries) -> None:
    """Forked attempts (spawned ones: test_cli.py drills the README's command)."""
    with shared_discovery(Drill(CMD, DrillOptions(root=tmp_path, workers=2, launcher="fork"))) as drill:
        result = drill.run_all()
    labels = [c.schedule for c in result.cases]
    for point in (
        "during:payments.charge",
        "during:counter.increment",
        "during:mailbox.send",
        "after:send_receipt",
    ):
        assert point in labels
    assert result.ok, "\n\n".join(c.text() for c in result.cases if not c.ok)


def test_correct_example_passes_mid_step_kills(tmp_path: Path, shared_discovery: SharedDiscoveries) -> None:
    """Kills between boundaries, not only at them: the example is exactly-once under any kill.

    ``POINT+Xms`` lands X ms after the agent is released at POINT, wherever it then is (inside
    a provider call, between an effect and its checkpoint), independent of machine load.
    Absolute ``offset:`` kills are exercised too; under load a run can end before its offset,
    which proves nothing but is not a failure.  Forked attempts: a kill lands the same way in
    a forked process, and the planted bugs below spawn theirs.
    """
    drill = shared_discovery(Drill(CMD, DrillOptions(root=tmp_path, workers=2, launcher="fork")))
    catalogue = drill.discover().catalogue
    delayed = [
        "before:charge_customer+0.3ms",
        "before:charge_customer+2ms",
        "during:payments.charge+0.2ms",
        "before:write_invoice+1ms",
        "during:kv.set+0.5ms",
        "before:send_receipt+1ms",
        "during:mailbox.send+0.1ms",
        "before:charge_customer+1ms,before:send_receipt+0.5ms",
    ]
    start, span = catalogue[0].t_ms, catalogue[-1].t_ms - catalogue[0].t_ms
    offsets = [f"offset:{start + span * f:.1f}ms" for f in (0.2, 0.5, 0.8)]
    landed = 0
    with drill:
        for s in [*delayed, *offsets]:
            case = drill.run_case(s, check=False)
            if "point_not_reached" not in case.kinds:
                assert case.ok, case.text()
                landed += s in delayed and case.attempts[0].outcome == "killed"
    assert landed >= len(delayed) - 1, "mid-step kills did not land: the test proved nothing"


@pytest.mark.parametrize(
    ("bug", "point", "kind"),
    [
        ("uuid_key", "during:payments.charge", "key_changed"),
        ("clock_key", "after:charge_customer", "key_changed"),
        ("no_key", "during:payments.charge", "duplicate_effect"),
        ("recomputed_amount", "during:payments.charge", "key_reused"),
        ("ungated_email", "during:mailbox.send", "duplicate_effect"),
        ("counter_no_key", "during:counter.increment", "duplicate_effect"),
    ],
)
def test_planted_bug_is_caught(tmp_path: Path, bug: str, point: str, kind: str) -> None:
    case = Drill([*CMD, "--bug", bug], DrillOptions(root=tmp_path)).run_case(point)
    assert kind in case.kinds, case.text()


def test_resubmitted_input_is_reported_as_restart(tmp_path: Path) -> None:
    case = Drill([*CMD, "--bug", "resubmit_input"], DrillOptions(root=tmp_path)).run_case(
        "committed:charge_customer"
    )
    assert any(n.startswith("resumed_from_start") for n in case.notes), case.text()


@pytest.mark.slow  # a repetition: the drill once is test_correct_example_passes_every_point
def test_whole_drill_passes_repeatedly_with_forked_attempts(tmp_path: Path) -> None:
    """No flake: the whole drill, three times (20 in a row: nightly/test_nightly_drills.py)."""
    with Drill(CMD, DrillOptions(root=tmp_path, workers=2, launcher="fork")) as drill:
        for _ in range(3):
            result = drill.run_all()
            assert result.ok, "\n\n".join(c.text() for c in result.cases if not c.ok)
