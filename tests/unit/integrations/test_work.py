"""The work lines a service leaves on its stderr: pending until any process says it is done."""

from __future__ import annotations

import pytest

from killdrill.integrations._work import said, unfinished, without_work, work_line


def test_a_run_is_unfinished_until_some_process_says_it_is_done(capfd: pytest.CaptureFixture[str]) -> None:
    work_line("pending", "wf-1", "refund_workflow")
    work_line("pending", "wf-2", "refund workflow")  # a name with a space stays one word
    work_line("done", "wf-2")
    own = capfd.readouterr().err
    assert unfinished(own) == {"wf-1": "refund_workflow"}
    assert unfinished(own, "killdrill: work done wf-1\n") == {}  # done in another process
    assert unfinished("killdrill: work done wf-1\n" + own) == {}  # the order does not matter
    assert unfinished("INFO some log\nkilldrill: work pendingwf-1 x\n") == {}


def test_a_line_a_frameworks_log_redirect_prefixed_is_read(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's worker makes ``sys.stderr`` a logger: the line goes to the process's own stderr,
    and one a log prefixed anyway is still a work line (else a case would end while a Celery
    worker holds a task whose ack the broker's restart lost)."""
    import io
    import sys

    monkeypatch.setattr(sys, "stderr", io.StringIO())  # what Celery's redirect stands for
    work_line("pending", "payout-1", "task")
    assert sys.stderr.getvalue() == ""
    assert unfinished(capfd.readouterr().err) == {"payout-1": "task"}
    logged = "[2026-12-07 18:18:40,200: WARNING/MainProcess] killdrill: work pending payout-2 task\n"
    assert unfinished(logged) == {"payout-2": "task"}
    assert unfinished(logged, "[x: WARNING/MainProcess] killdrill: work done payout-2\n") == {}
    assert without_work("INFO a\n" + logged + "boom\n") == "INFO a\nboom\n"


def test_a_stderr_tail_shown_to_a_person_has_no_work_lines() -> None:
    text = "INFO started\nkilldrill: work pending wf-1 refund\nValueError: boom\nkilldrill: work done wf-1"
    assert without_work(text) == "INFO started\nValueError: boom\n"


def test_only_a_deployments_services_say_their_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILLDRILL_PROCESS", raising=False)
    assert not said()  # a single command's drill: its end is its exit
    monkeypatch.setenv("KILLDRILL_PROCESS", "driver")
    assert not said()
    monkeypatch.setenv("KILLDRILL_PROCESS", "app")
    assert said()
