"""The zombie worker over SMTP: each attempt's mail is its own.

Over HTTP each launch has its own URL, and over SMTP its own address: one address bound to the
launch started last would record the woken zombie's mail as the resumer's, and say the resumer
was killed at ``during:mailbox.send`` though it was held elsewhere and sent nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions

pytest.importorskip("aiosmtpd")

MAILER = Path(__file__).parents[1] / "agents" / "fleet" / "mailer.py"


def test_a_paused_zombies_mail_is_recorded_as_its_own_attempt_and_pid(tmp_path: Path) -> None:
    options = DrillOptions(root=tmp_path, discovery_runs=1, launcher="fork", smtp_fake=True)
    with Drill([sys.executable, str(MAILER)], options) as drill:
        case = drill.run_case("pause:after:compose")
    zombie, resumer = case.attempts[:2]
    assert (zombie.number, resumer.number) == (1, 2)
    assert any("paused (SIGSTOP" in n for n in zombie.notes)
    assert case.ledger is not None
    mails = [c for c in case.ledger.calls if c.provider == "mailbox"]
    assert sorted(c.attempt for c in mails) == [1, 2], case.text()
    pids = {a.number: {e.pid for e in a.trace if e.point.endswith(":compose")} for a in (zombie, resumer)}
    for mail in mails:
        assert pids[mail.attempt] == {mail.pid}, (mail, pids)  # the sender's process, not pid 0
    assert case.kinds == ("duplicate_effect",)  # ungated: the zombie's mail is a second email
