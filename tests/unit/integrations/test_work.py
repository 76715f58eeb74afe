"""The work lines a service leaves on its stderr: pending until any process says it is done."""

from __future__ import annotations

import pytest

from killdrill.integrations._work import unfinished, work_line


def test_a_run_is_unfinished_until_some_process_says_it_is_done(capsys: pytest.CaptureFixture[str]) -> None:
    work_line("pending", "wf-1", "refund_workflow")
    work_line("pending", "wf-2", "refund workflow")  # a name with a space stays one word
    work_line("done", "wf-2")
    own = capsys.readouterr().err
    assert unfinished(own) == {"wf-1": "refund_workflow"}
    assert unfinished(own, "killdrill: work done wf-1\n") == {}  # done in another process
    assert unfinished("killdrill: work done wf-1\n" + own) == {}  # the order does not matter
    assert unfinished("INFO some log\nkilldrill: work pendingwf-1 x\n") == {}
