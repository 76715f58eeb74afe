"""Pre-forking launcher: import the agent's heavy modules once, fork one child per attempt.

Drilling a LangGraph agent is dominated by its import time (langgraph, langchain_core,
SQLAlchemy): every attempt pays it again.  A *template* process imports those modules
once; each attempt is then a ``fork()`` of the template, set up as a fresh process would
be: its own session and process group, its own environment, argv, working directory,
stdio files, reseeded randomness, and ``PR_SET_PDEATHSIG`` so it dies with the template.
The template dies with the harness (it exits when its control socket closes).

When forking is unsafe, keep the default (plain spawn): the template must be
single-threaded when it forks (a preloaded module that starts threads or opens
connections at import breaks the children), and state created at import (random
generators other than ``random``, caches keyed by pid, open files) is shared by copy.

Protocol (JSON lines over a socketpair): the harness sends ``{"spawn": {...}}``; the
template answers ``{"pid": N}`` (or ``{"error": ...}``) and later ``{"exit": N, "code": C}``
(``C`` negative for a signal, as in ``subprocess``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_PRELOAD = ("killdrill", "killdrill.fakes", "killdrill.effects")


class LaunchError(RuntimeError):
    """The template could not start or could not fork an attempt."""


def python_target(argv: Sequence[str]) -> bool:
    """Can this command be forked from a Python template (``python -m mod`` / ``python x.py``)?"""
    if len(argv) < 2:
        return False
    exe = os.path.basename(argv[0])
    if not exe.startswith("python"):
        return False
    return (argv[1] == "-m" and len(argv) > 2) or not argv[1].startswith("-")


class ForkedProcess:
    """The part of ``subprocess.Popen`` the supervisor uses, for a child of the template."""

    def __init__(self, launcher: Launcher, pid: int) -> None:
        self.launcher = launcher
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.launcher.exit_code(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.launcher.exit_code(self.pid, timeout=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0)
        return self.returncode


class Launcher:
    """Harness side: starts the template and asks it to fork attempts.  Thread-safe.

    One reader thread takes every message from the template: spawn replies go to the
    caller waiting on the request lock, exit statuses into a table others wait on.
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
        self.cwd = cwd
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._request_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: list[dict[str, Any]] = []
        self._exits: dict[int, int] = {}
        self._dead = False

    def start(self) -> Launcher:
        parent, child = socket.socketpair()
        self._proc = subprocess.Popen(
            [self.python, "-m", "killdrill.launcher", str(child.fileno())],
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
        threading.Thread(target=self._read_loop, name="killdrill-launcher", daemon=True).start()
        reply = self._request({"preload": self.preload})
        if reply is None or "error" in reply:
            err = (reply or {}).get("error") or self._stderr()
            self.close()
            raise LaunchError(f"the pre-forking template could not start: {err}")
        return self

    def _read_loop(self) -> None:
        assert self._sock is not None
        reader = self._sock.makefile("rb")
        try:
            for line in reader:
                msg = json.loads(line)
                with self._cond:
                    if "exit" in msg:
                        self._exits[msg["exit"]] = msg["code"]
                    else:
                        self._replies.append(msg)
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._dead = True
                self._cond.notify_all()

    def _request(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        assert self._sock is not None
        with self._request_lock:
            try:
                self._sock.sendall(json.dumps(msg).encode() + b"\n")
            except OSError:
                return None
            with self._cond:
                self._cond.wait_for(lambda: self._replies or self._dead)
                return self._replies.pop(0) if self._replies else None

    def _stderr(self) -> str:
        if self._proc is None or self._proc.stderr is None:
            return ""
        with contextlib.suppress(Exception):
            self._proc.wait(timeout=2)
            return self._proc.stderr.read().decode("utf-8", "replace").strip()[-2000:]
        return ""

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, stdout: str, stderr: str
    ) -> ForkedProcess:
        spec = {"argv": list(argv), "env": dict(env), "cwd": cwd, "stdout": stdout, "stderr": stderr}
        reply = self._request({"spawn": spec})
        if reply is None:
            raise LaunchError(f"the pre-forking template died: {self._stderr()}")
        if "error" in reply:
            raise LaunchError(reply["error"])
        return ForkedProcess(self, reply["pid"])

    def exit_code(self, pid: int, *, timeout: float | None = None) -> int | None:
        """The child's exit code (negative: killed by that signal); None if not exited in time."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or self._dead, timeout=timeout)
            if pid in self._exits:
                return self._exits.pop(pid)
            if self._dead:
                raise LaunchError("the pre-forking template died")
            return None

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stderr is not None:
                self._proc.stderr.close()
            self._proc = None

    def __enter__(self) -> Launcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- the template process ----------------------------------------------------------------------


def _child(spec: dict[str, Any], sock: socket.socket) -> None:
    """In the forked child: become a fresh process running ``spec["argv"]``; never returns."""
    code = 1
    try:
        sock.close()
        os.setsid()
        from killdrill.supervisor import _child_setup

        _child_setup()  # PR_SET_PDEATHSIG: die with the template
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, spec["stdout"]), (2, spec["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        if spec.get("cwd"):
            os.chdir(spec["cwd"])
        os.environ.clear()
        os.environ.update(spec["env"])
        import random

        random.seed()
        argv = spec["argv"][1:]
        import runpy

        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _template(fd: int) -> None:
    import importlib
    import selectors

    sock = socket.socket(fileno=fd)
    reader = sock.makefile("rb")

    def send(msg: dict[str, Any]) -> None:
        sock.sendall(json.dumps(msg).encode() + b"\n")

    hello = json.loads(reader.readline() or "{}")
    for name in hello.get("preload", ()):
        try:
            importlib.import_module(name)
        except BaseException as exc:
            send({"error": f"cannot preload {name}: {exc.__class__.__name__}: {exc}"})
            return
    if threading.active_count() > 1:
        send({"error": f"preloading started {threading.active_count() - 1} thread(s): forking is unsafe"})
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    send({"ready": True})
    children: set[int] = set()
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    buffer = b""
    try:
        while True:
            for key, _ in sel.select():
                if key.fileobj == wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
                    continue
                data = sock.recv(65536)
                if not data:
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    spec = json.loads(line)["spawn"]
                    pid = os.fork()
                    if pid == 0:
                        _child(spec, sock)
                    children.add(pid)
                    send({"pid": pid})
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                children.discard(pid)
                send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    _template(int(sys.argv[1]))
