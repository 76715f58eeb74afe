"""The bundled settlement example under real kills: the correct form is exactly-once at every
point and at millisecond offsets; each planted bug is caught with the documented kind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions

CMD = [
    sys.executable,
    "-m",
    "killdrill.examples.settlement",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
]


def test_correct_example_passes_every_point(tmp_path: Path) -> None:
    drill = Drill(CMD, DrillOptions(root=tmp_path, workers=2))
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


def test_correct_example_passes_offset_kills(tmp_path: Path) -> None:
    drill = Drill(CMD, DrillOptions(root=tmp_path, workers=2))
    # offsets inside the stretch where effects happen: from the first boundary to the last
    catalogue = drill.discover().catalogue
    start, span = catalogue[0].t_ms, catalogue[-1].t_ms - catalogue[0].t_ms
    schedules = [f"offset:{start + span * f:.1f}ms" for f in (0.1, 0.3, 0.5, 0.7, 0.9)]
    schedules.append(f"offset:{start + span * 0.4:.1f}ms,offset:{start + span * 0.8:.1f}ms")
    landed = 0
    for s in schedules:
        case = drill.run_case(s, check=False)
        # under load a run can finish before its offset: that case proved nothing, not a failure
        if "point_not_reached" not in case.kinds:
            assert case.ok, case.text()
            landed += case.attempts[0].outcome == "killed"
    assert landed >= 3, "too few offset kills landed to prove anything"


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
