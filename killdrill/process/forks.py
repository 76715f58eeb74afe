"""Fork templates, harness side: every attempt starts under its own keeper, forked from a small template.

Two kinds of template, one protocol.  The *warden* (``warden()``, one per harness process)
imports nothing of the agent and execs each spawned command.  A pre-forking template
(``ForkTemplate(python, preload=...)``, ``--launcher fork``) imports the agent's heavy modules
once (a framework and SQLAlchemy: the import time dominates a framework's drill) and
each attempt runs as a ``fork()`` of it, set up as a fresh process would be: its own session
and process group, environment, argv, working directory, stdio files, reseeded randomness.
Either way the template forks a keeper per attempt (killdrill.process.containment), which forks the
agent and owns everything the agent starts; the template is a subreaper too, and when the
harness goes away (its socket closes, even on SIGKILL) it has every keeper clean up and exits.

When forking is unsafe, keep plain spawn: the template must be single-threaded when it forks
(a preloaded module that starts threads or opens connections at import breaks the children),
and state created at import (random generators other than ``random``, caches keyed by pid,
open files) is shared by copy; what was imported is frozen for the garbage collector (``gc.freeze``).

The template process itself is killdrill.process.template.  Protocol (JSON lines over a socketpair):
the harness sends ``{"spawn": {...}}``; the template
answers ``{"pid": N, "keeper": K}`` (or ``{"error": ...}``) and later ``{"exit": N, "code": C}``
(``C`` negative for a signal, as in ``subprocess``) once the keeper is done: nothing of the
attempt runs any more.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from killdrill import envvars
from killdrill.errors import HarnessError
from killdrill.isolation import isolated
from killdrill.process import containment

DEFAULT_PRELOAD = ("killdrill", "killdrill.fakes", "killdrill.effects")


class TemplateError(HarnessError, RuntimeError):
    """A fork template could not start, could not fork an attempt, or died."""


def python_target(argv: Sequence[str]) -> bool:
    """Can this command be forked from a Python template (``python -m mod`` / ``python x.py``)?"""
    if len(argv) < 2:
        return False
    exe = os.path.basename(argv[0])
    if not exe.startswith("python"):
        return False
    return (argv[1] == "-m" and len(argv) > 2) or not argv[1].startswith("-")


_templates: weakref.WeakSet[ForkTemplate] = weakref.WeakSet()


class ForkedProcess:
    """The part of ``subprocess.Popen`` the supervisor uses, for a child of the template."""

    def __init__(self, template: ForkTemplate, pid: int, keeper: int) -> None:
        self.template = template
        self.pid = pid
        self.keeper = keeper  # the attempt's subreaper: it exits once nothing of the attempt is left
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._take(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._take(timeout)
        if code is None:
            raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0)
        return code

    def _take(self, timeout: float | None) -> int | None:
        # The template forgets the status only once it is ours: an exception raised in between
        # (Ctrl-C lands anywhere) must not lose it, or the next wait() would wait forever.
        if self.returncode is None:
            self.returncode = self.template.exit_code(self.pid, timeout=timeout)
            if self.returncode is not None:
                self.template.forget(self.pid)
        return self.returncode


class ForkTemplate:
    """The harness's client of one template process: starts it and asks it to fork attempts.  Thread-safe.

    No reader thread: whoever waits for a message (a spawn's reply, an attempt's exit) reads the
    socket for every waiter while the others sleep on the condition (leader and followers).
    Spawn replies go to the caller holding the request lock, exit statuses into a table.  A
    reader thread cost a thread switch on every spawn and every exit (0.8 ms each measured on
    2 cores, about a fifth of a short case's harness time).
    """

    def __init__(
        self,
        python: str,
        *,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.python = python
        self.preload = list(dict.fromkeys(preload))
        self.env = dict(env if env is not None else os.environ)
        # A process under this template whose environment was stripped learns from it that it
        # runs under a drill (killdrill.fakes.locate, which names this variable TEMPLATE_MARK).
        self.env[envvars.TEMPLATE] = "1"
        self.cwd = cwd
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._request_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: list[dict[str, Any]] = []
        self._exits: dict[int, int] = {}
        self._live: dict[int, int] = {}  # agent pid -> keeper pid, until the exit arrives
        self._dead = False
        self._reading = False  # a waiter is reading the socket for everyone
        self._buffer = b""
        self._poll: select.poll | None = None
        self.owner = os.getpid()

    def start(self) -> ForkTemplate:
        _templates.add(self)
        parent, child = socket.socketpair()
        self._proc = subprocess.Popen(
            [self.python, "-m", "killdrill.process.template", str(child.fileno())],
            pass_fds=[child.fileno()],
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        child.close()
        self._sock = parent
        self._poll = select.poll()  # one for every read: a read is on every attempt's start and end
        self._poll.register(parent, select.POLLIN)
        reply = self._request({"preload": self.preload})
        if reply is None or "error" in reply:
            err = (reply or {}).get("error") or self._stderr()
            self.close()
            raise TemplateError(f"the pre-forking template could not start: {err}")
        return self

    def _wait(self, ready: Callable[[], bool], timeout: float | None = None) -> bool:
        """With ``self._cond`` held: wait until ``ready()`` or the template is gone, reading the
        socket unless another waiter already is; ``ready()`` at the end (``timeout`` s at most)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        looked = False  # a timeout of 0 still reads what has arrived, once
        while not ready() and not self._dead:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0 and looked:
                break
            looked = True
            if self._reading:
                self._cond.wait(left)
                continue
            self._reading = True
            self._cond.release()
            lines: list[bytes] | None = None
            try:
                lines = self._read(left)
            finally:
                self._cond.acquire()
                self._reading = False
                if lines is None:  # interrupted (Ctrl-C) mid-read: a line may be lost, trust nothing
                    self._hang_up()
                for line in lines or ():
                    self._take(line)
                self._cond.notify_all()
        return ready()

    def _read(self, timeout: float | None) -> list[bytes]:
        """The complete lines the template sent within ``timeout`` s (b"" at the end: it is gone)."""
        sock, poll = self._sock, self._poll
        if sock is None or poll is None:
            return [b""]
        if not poll.poll(None if timeout is None else timeout * 1000):
            return []
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            return [b""]
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        return lines

    def _take(self, line: bytes) -> None:
        """One line from the template: a reply, an exit status, or (b"" or garbage) its end."""
        try:
            msg = json.loads(line) if line else None
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            self._dead = True
        elif "exit" in msg:
            self._exits[msg["exit"]] = msg["code"]
            self._live.pop(msg["exit"], None)
        else:
            self._replies.append(msg)

    def _hang_up(self) -> None:
        """Stop talking to the template: it kills every attempt and exits."""
        self._dead = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def _request(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        assert self._sock is not None
        with self._request_lock:
            try:
                self._sock.sendall(json.dumps(msg).encode() + b"\n")
            except OSError:
                return None
            try:
                with self._cond:
                    self._wait(lambda: bool(self._replies))
                    return self._replies.pop(0) if self._replies else None
            except BaseException:
                # Interrupted before the reply (Ctrl-C): its attempt would run untracked and the
                # next request would read this reply.  Hang up: the template kills every attempt.
                with self._cond:
                    self._hang_up()
                raise

    def _stderr(self) -> str:
        if self._proc is None or self._proc.stderr is None:
            return ""
        with contextlib.suppress(Exception):
            self._proc.wait(timeout=2)
            return self._proc.stderr.read().decode("utf-8", "replace").strip()[-2000:]
        return ""

    @property
    def dead(self) -> bool:
        """The template is gone (what it sent so far is read first, without waiting)."""
        if self._sock is None:
            return True
        with self._cond:
            self._wait(lambda: False, timeout=0)
        return self._dead

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | None,
        stdout: str,
        stderr: str,
        exec_: bool = False,
    ) -> ForkedProcess:
        """Start one attempt under its own keeper: exec ``argv`` or (``exec_`` False) run it forked."""
        spec = {
            "argv": list(argv),
            "env": dict(env),
            "cwd": cwd,
            "stdout": stdout,
            "stderr": stderr,
            "exec": exec_,
        }
        reply = self._request({"spawn": spec})
        if reply is None:
            raise TemplateError(f"the fork template died: {self._stderr()}")
        if "error" in reply:
            raise TemplateError(reply["error"])
        with self._cond:
            if reply["pid"] not in self._exits:
                self._live[reply["pid"]] = reply["keeper"]
        return ForkedProcess(self, reply["pid"], reply["keeper"])

    def kill_all(self) -> None:
        """Kill every attempt still running (an interrupted harness): each keeper cleans its tree."""
        with self._cond:
            live = list(self._live.items())
        for agent, keeper in live:
            containment.kill_attempt(agent, keeper, scan=False)

    def exit_code(self, pid: int, *, timeout: float | None = None) -> int | None:
        """The child's exit code (negative: killed by that signal); None if not exited in time."""
        with self._cond:
            self._wait(lambda: pid in self._exits, timeout)
            if pid in self._exits:
                return self._exits[pid]
            if self._dead:
                raise TemplateError("the pre-forking template died")
            return None

    def forget(self, pid: int) -> None:
        """Drop a status its process has taken (the pid may be used again)."""
        with self._cond:
            self._exits.pop(pid, None)

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
            self._poll = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stderr is not None:
                self._proc.stderr.close()
            self._proc = None

    def __enter__(self) -> ForkTemplate:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_warden: ForkTemplate | None = None
_warden_lock = threading.Lock()


def warden() -> ForkTemplate:
    """The process-wide template that execs spawned attempts, each under its own keeper.

    Started on first use (one small interpreter, ~20 ms once), restarted if it died or if this
    process is a fork of the one that started it; it stops when this process exits, even by
    SIGKILL (its socket closes), and kills every attempt still running then.
    """
    global _warden
    with _warden_lock:
        if _warden is None or _warden.dead or _warden.owner != os.getpid():
            import atexit

            env = isolated(envvars.without_drill(os.environ))
            # The template must import this killdrill, even one found through a sys.path edit.
            here = os.path.dirname(os.path.dirname(os.path.abspath(containment.__file__)))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
            _warden = ForkTemplate(sys.executable, preload=(), env=env).start()
            atexit.register(_warden.close)
        return _warden


class WardenHost:
    """The :class:`killdrill.integrations.ServiceHost` the drill lends a service: a process
    exec'd by the warden under its own keeper, so it dies with the harness however that ends."""

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, stdout: str, stderr: str
    ) -> ForkedProcess:
        return warden().spawn(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, exec_=True)

    def kill(self, proc: object) -> None:
        """SIGKILL the process and all it started (its keeper reaps the rest)."""
        if isinstance(proc, ForkedProcess):
            containment.kill_attempt(proc.pid, proc.keeper)


def live_templates() -> list[ForkTemplate]:
    """The fork templates of this process that may have attempts running (for interrupts)."""
    with _warden_lock:
        found = [_warden] if _warden is not None and _warden.owner == os.getpid() else []
    return found + [la for la in list(_templates) if la.owner == os.getpid()]
