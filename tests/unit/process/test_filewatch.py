"""Files watched for writes (inotify): each write calls the file's actions once a dispatch reads
it, a removed action is not called, a file that cannot be watched says so; and a supervisor runs a
nemesis's watched fd's action on its loop."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from killdrill.process.attempts import LaunchSpec
from killdrill.process.filewatch import FileWatch
from killdrill.process.nemesis import Nemesis
from killdrill.process.supervisor import Supervisor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def watch() -> Iterator[FileWatch]:
    w = FileWatch.open()
    assert w is not None, "Linux without inotify"
    yield w
    w.close()


def _append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def test_a_write_calls_the_files_actions_once_per_dispatch(tmp_path: Path, watch: FileWatch) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.touch()
    b.touch()
    calls: list[str] = []
    assert watch.add(str(a), lambda: calls.append("a1"))
    assert watch.add(str(a), lambda: calls.append("a2"))
    assert watch.add(str(b), lambda: calls.append("b"))
    watch.dispatch()
    assert calls == []  # nothing written yet
    _append(a, "one\n")
    _append(a, "two\n")
    watch.dispatch()
    assert calls == ["a1", "a2"]  # two writes, one read: each action once
    _append(b, "x")
    _append(a, "y")
    assert watch.written() == [str(b), str(a)]  # in the order first written


def test_a_removed_action_is_not_called_and_the_last_ends_the_watch(tmp_path: Path, watch: FileWatch) -> None:
    path = tmp_path / "a.log"
    path.touch()
    calls: list[str] = []

    def first() -> None:
        calls.append("first")

    def second() -> None:
        calls.append("second")

    watch.add(str(path), first)
    watch.add(str(path), second)
    watch.remove(str(path), first)
    _append(path, "x")
    watch.dispatch()
    assert calls == ["second"]
    watch.remove(str(path), second)
    assert watch.watched() == []
    _append(path, "y")
    watch.dispatch()
    assert calls == ["second"]


def test_a_file_that_is_not_there_cannot_be_watched(tmp_path: Path, watch: FileWatch) -> None:
    assert not watch.add(str(tmp_path / "missing.log"), lambda: None)
    assert watch.watched() == []
    watch.close()
    assert not watch.add(str(tmp_path), lambda: None)  # closed: nothing watched any more


class _Watcher(Nemesis):
    """Watches a pipe from ``begin``; its action, run by the loop, records and ends the launch."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self.got: list[bytes] = []

    def begin(self) -> None:
        stage = self.bound()
        stage.watch(self.read_end, self._readable)
        stage.at(0.05, lambda: os.write(self.write_end, b"x"))
        stage.at(5.0, lambda: [stage.kill(r, "never watched") for r in stage.running])

    def _readable(self) -> None:
        stage = self.bound()
        self.got.append(os.read(self.read_end, 10))
        stage.unwatch(self.read_end)
        stage.unwatch(self.read_end)  # twice: nothing
        for run in stage.running:
            stage.kill(run, "watched")


def test_the_supervisor_runs_a_watched_fds_action_on_its_loop(tmp_path: Path) -> None:
    spec = LaunchSpec(
        argv=["sleep", "30"], env={"PATH": os.environ["PATH"]}, cwd=None,
        stdout_path=str(tmp_path / "out"), stderr_path=str(tmp_path / "err"), number=1, fault=None,
        timeout_s=30, control_dir=str(tmp_path / "ctl"),
    )  # fmt: skip
    nemesis = _Watcher()
    try:
        (attempt,) = Supervisor(faults=[nemesis]).run_many([spec])
    finally:
        os.close(nemesis.read_end)
        os.close(nemesis.write_end)
    assert nemesis.got == [b"x"]
    assert attempt.killed_at == "watched"


def test_a_watch_dropped_unclosed_frees_its_fd() -> None:
    w = FileWatch.open()
    assert w is not None
    fd = w.fileno()
    del w
    with pytest.raises(OSError):
        os.fstat(fd)
