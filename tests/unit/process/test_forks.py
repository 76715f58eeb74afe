"""A fork template's socket has no reader thread: whoever waits reads for everyone.

Real templates and real attempts: what must hold is that no message is lost or taken by the
wrong waiter when several threads spawn and wait at once, and that a dead template is noticed
by whoever asks, waiting or not.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from killdrill.process import containment
from killdrill.process.forks import ForkTemplate, TemplateError

pytestmark = pytest.mark.skipif(not containment.supported(), reason="keepers need Linux prctl")
ENV = dict(os.environ)


@pytest.fixture()
def template() -> ForkTemplate:
    with ForkTemplate(sys.executable, preload=(), env=ENV) as la:
        yield la


def _exits_with(tmp_path: Path, code: int, sleep_s: float) -> list[str]:
    script = tmp_path / f"exit_{code}.py"
    script.write_text(f"import sys, time\ntime.sleep({sleep_s})\nsys.exit({code})\n")
    return [sys.executable, str(script)]


def test_threads_spawning_and_waiting_at_once_each_get_their_own_exit(
    template: ForkTemplate, tmp_path: Path
) -> None:
    got: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            codes = []
            for i in range(6):
                code = 10 * t + i
                argv = _exits_with(tmp_path, code, 0.001 * ((t * 7 + i * 3) % 5))
                out = str(tmp_path / f"{code}.out")
                proc = template.spawn(
                    argv, env=dict(os.environ), cwd=None, stdout=out, stderr=out, exec_=i % 2 == 0
                )
                codes.append(proc.wait(timeout=30))
            got[t] = codes
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(1, 5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert got == {t: [10 * t + i for i in range(6)] for t in range(1, 5)}


def test_a_killed_template_is_noticed_by_a_waiter_and_by_the_pool_that_asks(
    template: ForkTemplate, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    proc = template.spawn(
        _exits_with(tmp_path, 0, 30), env=dict(os.environ), cwd=None, stdout=out, stderr=out
    )
    assert not template.dead
    assert template._proc is not None
    threading.Timer(0.2, os.kill, (template._proc.pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(TemplateError, match="template died"):
        proc.wait(timeout=10)
    assert time.monotonic() - t0 < 5
    assert template.dead


def test_dead_is_seen_without_anyone_waiting(template: ForkTemplate) -> None:
    assert template._proc is not None
    os.kill(template._proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while not template.dead and time.monotonic() < deadline:
        time.sleep(0.01)
    assert template.dead


class _Interrupt(Exception):
    pass


def test_a_wait_interrupted_mid_read_hangs_up_and_the_template_kills_the_attempt(
    template: ForkTemplate, tmp_path: Path
) -> None:
    """Ctrl-C while waiting: the waiter may have read part of a line, so the template trusts
    nothing more; it hangs up, and the template kills every attempt (nothing runs untracked)."""
    out = str(tmp_path / "out")
    proc = template.spawn(_exits_with(tmp_path, 0, 30), env=ENV, cwd=None, stdout=out, stderr=out)
    agent = psutil.Process(proc.pid)

    def interrupt(*_: object) -> None:
        raise _Interrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(_Interrupt):
            proc.wait(timeout=10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert template.dead
    agent.wait(timeout=5)  # killed by its keeper when the template saw the hang-up
    with pytest.raises(TemplateError):
        proc.wait(timeout=1)
