"""Containment: every process an attempt starts is found and killed, however it detaches.

A process group misses children in new sessions, an environment marker misses daemons that
clear their environment or never exec, and a one-shot scan misses a daemon that changes pid.
So each attempt gets a *keeper*: a small process, forked from the fork template
(killdrill.process.forks), that is the attempt's parent and a child subreaper
(``PR_SET_CHILD_SUBREAPER``).  Whatever the agent's processes do (setsid, double fork, exit of
every parent), the orphans are re-parented to the keeper, never to init, so they stay in its
subtree.  The keeper:

- forks the agent (own session and process group, ``PR_SET_PDEATHSIG=SIGKILL``, then exec or,
  in fork mode, runs the module);
- once the agent has exited or SIGTERM arrives (the harness's kill, the template's shutdown,
  or its parent-death signal when the template dies), stops every descendant, rescans until
  nothing new appears, kills them all, reaps, and repeats until it has no child left;
- only then exits, with the agent's status (same code, or killed by the same signal).

The harness sees an attempt end when the keeper exits: nothing of the attempt is left
running at that moment, so nothing can send an effect "after the kill".  Unprivileged: no
root, no cgroup needed (Linux >= 3.4).  The template is a subreaper too, and it kills its own
subtree when the harness goes away (its socket closes, even on SIGKILL).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
import signal
import sys
from collections.abc import Callable, Collection, Iterable
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where it is unavailable or refused."""
    return _prctl is not None and _prctl(option, value, 0, 0, 0) == 0


def supported() -> bool:
    """Can attempts be contained by keepers here (Linux with /proc and prctl)?"""
    return _prctl is not None and os.path.isdir("/proc/self")


# ---- finding a subtree -------------------------------------------------------------------------


def _parents() -> dict[int, int]:
    """pid -> parent pid for every live (non-zombie) process we can see.

    Raw ``os.open``/``os.read`` on /proc (no file objects): a scan is on the kill path of every
    attempt, and this halves it (measured 1.6 -> 0.9 ms for 100 processes).
    """
    table: dict[int, int] = {}
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(proc):
            if not name.isdigit():
                continue
            try:
                fd = os.open(f"{name}/stat", os.O_RDONLY, dir_fd=proc)
            except OSError:
                continue
            try:
                stat = os.read(fd, 4096)
            except OSError:
                continue
            finally:
                os.close(fd)
            fields = stat[stat.rindex(b")") + 2 :].split(b" ", 2)
            if fields[0] in (b"Z", b"X"):
                continue
            table[int(name)] = int(fields[1])
    finally:
        os.close(proc)
    return table


def subtree(root: int, spare: Collection[int] = ()) -> list[int]:
    """The live descendants of ``root`` (not ``root`` itself), parents before their children.

    The ``spare`` pids and their own descendants are left out.
    """
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    order: list[int] = []
    todo = [pid for pid in children.get(root, ()) if pid not in spare]
    while todo:
        pid = todo.pop(0)
        order.append(pid)
        todo.extend(children.get(pid, ()))
    return order


def descendants(root: int) -> list[int]:
    """The descendants of ``root`` read from each process's ``/proc/PID/task/TID/children``
    (parents before their children): a few reads, where :func:`subtree` scans every process of
    the machine (2 ms for 220 processes, ~9 ms at load 14, on the kill path of every attempt).
    The kernel keeps those lists exact only for a tree that holds still, so this is the
    harness's fast first pass; the keeper, the subreaper that outlives the attempt's
    processes, makes sure with full scans.  Falls back to :func:`subtree` without the files."""
    order: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop(0)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            if pid == root and not os.path.exists(f"/proc/{pid}"):
                return []
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    found = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                    continue  # that thread ended
                return subtree(root)  # no children files in this kernel
            except OSError:
                continue
            order.extend(found)
            todo.extend(found)
    return order


def signal_all(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each pid that still exists (and is ours to signal)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _state(pid: int) -> bytes:
    """The one-letter state of ``pid`` (b"" once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return b""
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3]


def until_stopped(pids: Iterable[int], limit_s: float = 0.2) -> None:
    """Wait (briefly) until every pid is stopped or dead: a process whose SIGSTOP is still in
    flight may be finishing a fork, and its child must be in the next scan."""
    import time

    waiting = list(pids)
    deadline = time.monotonic() + limit_s
    while waiting and time.monotonic() < deadline:
        waiting = [pid for pid in waiting if _state(pid) not in (b"", b"T", b"t", b"Z", b"X")]
        if waiting:
            time.sleep(0.0005)


def freeze_and_kill(root: int, spare: Collection[int] = ()) -> list[int]:
    """SIGSTOP every descendant of ``root``, rescanning until no new one appears, then SIGKILL them.

    Stopped processes cannot fork, so the rescans converge even on a fork loop; the kill then
    hits a tree that holds still.  Returns the pids killed.
    """
    seen: set[int] = set()
    order: list[int] = []
    while True:
        new = [pid for pid in subtree(root, spare) if pid not in seen]
        if not new:
            break
        signal_all(new, signal.SIGSTOP)
        until_stopped(new)
        seen.update(new)
        order.extend(new)
    signal_all(order, signal.SIGKILL)
    return order


def kill_attempt(pid: int, keeper: int | None, sig: int = signal.SIGKILL, *, scan: bool = True) -> None:
    """Harness side: signal an attempt's agent (``pid``, a group leader) and all it started.

    For SIGKILL everything under the keeper is frozen and killed right now, then the keeper is
    told (SIGTERM) to make sure, loop until none is left, and exit; ``scan=False`` (an
    interrupted harness, in a hurry) leaves all but the agent's group to the keeper.  For a
    drain (SIGTERM) the agent's group and descendants get the signal and the keeper is left
    alone: it cleans up after the agent exits.  Safe on processes that are already gone.
    """
    if sig == signal.SIGKILL:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGSTOP)
    found = descendants(keeper if keeper is not None else pid) if scan or keeper is None else []
    if sig == signal.SIGKILL:
        signal_all(found, signal.SIGSTOP)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    signal_all([pid, *found], sig)
    if keeper is not None and sig == signal.SIGKILL:
        signal_all([keeper], signal.SIGCONT)  # an agent may have stopped its keeper
        signal_all([keeper], signal.SIGTERM)


# ---- the keeper (runs in a process forked by the fork template) ----------------------------


class _Stop(BaseException):
    """SIGTERM reached the keeper: stop waiting, kill the subtree."""


def kill_and_reap_all(agent: int, status: int | None) -> int | None:
    """Kill and reap every descendant until none is left; return the agent's wait status.

    Children already SIGKILLed (by the harness) get 10 ms to die before the first scan, which
    then is not needed; one freeze-and-kill normally gets all; a rescan every 0.5 s covers
    what it could not see.  Between reaps it sleeps until the next SIGCHLD (blocked here and
    taken with ``sigtimedwait``), not a fixed tick: an attempt ends as soon as its last process does.
    """
    import time

    rescan_at = time.monotonic() + 0.01
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    try:
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return status
            if pid == agent:
                status = st
            if pid:
                continue
            now = time.monotonic()
            if now >= rescan_at:
                freeze_and_kill(os.getpid())
                rescan_at = time.monotonic() + 0.5
            else:
                signal.sigtimedwait([signal.SIGCHLD], rescan_at - now)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


class NotStarted(Exception):
    """The agent could not be started; the text says why in one line."""


def keeper(start_agent: Callable[[], int], report_fd: int, parent: int) -> NoReturn:
    """Become an attempt's keeper: start the agent, report its pid, own and clean its tree.

    ``start_agent()`` starts the agent as this process's child and returns its pid, or raises
    NotStarted.  The keeper writes ``pid N`` (or ``error TEXT``) to ``report_fd`` once the agent
    started, and ``exit CODE`` (the agent's, negative for a signal) once nothing of the attempt
    is left.  A keeper that dies without the last line was killed: its parent must clean up after it.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    code = 0
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the template died before we could hear it
            os._exit(1)
        try:
            agent = start_agent()
        except NotStarted as exc:
            os.write(report_fd, f"error {exc}\n".encode())
            os._exit(0)
        os.write(report_fd, f"pid {agent}\n".encode())
        stopping = False

        def on_term(signum: int, frame: Any) -> None:
            nonlocal stopping
            if not stopping:
                stopping = True
                raise _Stop()

        signal.signal(signal.SIGTERM, on_term)
        status: int | None = None
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])  # a pending one raises here
            while True:
                pid, st = os.waitpid(-1, 0)
                if pid == agent:
                    status = st
                    break
        except (_Stop, ChildProcessError):
            pass
        stopping = True
        status = kill_and_reap_all(agent, status)
        agent_code = -signal.SIGKILL if status is None else os.waitstatus_to_exitcode(status)
        os.write(report_fd, f"exit {agent_code}\n".encode())
    except BaseException:  # never let a keeper fall back into the template's code
        code = 1
    os._exit(code)


def fork_agent(run: Callable[[int], NoReturn]) -> int:
    """Start the agent as a fork of this process: ``run(error_fd)`` sets it up and runs it.

    ``run`` ends ``error_fd`` with :func:`say_started` once set up, or a line saying why it
    could not start.  Nothing at all: it died first (NotStarted too).
    """
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    agent = os.fork()
    if agent == 0:
        os.close(err_r)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
        run(err_w)
    os.close(err_w)
    started = _started(agent, err_r)
    if started is None:
        raise NotStarted("the agent died before it was set up")
    return started


_STARTED = b"\n"


def say_started(err_fd: int) -> None:
    """In a forked agent: tell its keeper it is set up (an empty line), and close ``err_fd``."""
    os.write(err_fd, _STARTED)
    os.close(err_fd)


def _started(agent: int, err_r: int) -> int | None:
    """``agent`` once it said it is set up; NotStarted with the line it wrote instead; None
    when it wrote nothing (it died first: killed, say, while it waited ahead), reaped."""
    said = read_all(err_r)
    error = said.decode("utf-8", "replace").strip()
    if error or not said:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(agent, 0)
    if error:
        raise NotStarted(error)
    return agent if said else None


class AgentAhead:
    """An agent forked before its attempt, idle until it is given its spec (``fork_agent_ahead``)."""

    def __init__(self, pid: int, spec_w: int, err_r: int) -> None:
        self.pid, self._spec_w, self._err_r = pid, spec_w, err_r

    def start(self, spec: bytes) -> int | None:
        """Give it its spec: its pid once it set itself up (NotStarted: why it did not), or None
        when it is gone (killed while it waited, or as it was given its spec: the caller forks
        another)."""
        if not send_all(self._spec_w, spec):
            os.close(self._err_r)
            return None
        return _started(self.pid, self._err_r)

    def discard(self) -> None:
        """Not needed (the attempt is spawned): it reads EOF and exits (its parent reaps it)."""
        os.close(self._spec_w)
        os.close(self._err_r)


def fork_agent_ahead(run: Callable[[bytes, int], NoReturn], close: Iterable[int] = ()) -> AgentAhead:
    """:func:`fork_agent` before the attempt is known: the child closes ``close`` and waits for
    its spec, then ``run(spec, error_fd)`` sets it up and runs it (EOF instead: it exits).

    The fork and the child's after-fork work were on the path from the harness's request to the
    agent's start, about half of it with a preloaded template."""
    spec_r, spec_w = os.pipe()
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    agent = os.fork()
    if agent == 0:
        try:
            os.close(spec_w)
            os.close(err_r)
            for fd in close:
                os.close(fd)
            spec = read_all(spec_r)
        except BaseException:
            os._exit(1)
        if not spec:
            os._exit(0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
        run(spec, err_w)
    os.close(spec_r)
    os.close(err_w)
    return AgentAhead(agent, spec_w, err_r)


_DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ)
"""Signals an agent starts with at their default action, whatever its keeper had (Python ignores
SIGPIPE and SIGXFSZ; ``subprocess`` restores both for a child, and so does this)."""


def spawn_agent(argv: list[str], env: dict[str, str], cwd: str | None, stdout: str, stderr: str) -> int:
    """Start the agent by ``posix_spawn`` (a vfork-exec: 1.5 instead of 2.9 ms measured here for a
    fork of the keeper and an exec): its own session, stdio files, every signal unblocked.

    Unlike a forked agent it gets no parent-death signal; if its keeper is killed, the template
    (a subreaper) inherits it and kills it before the harness hears that the attempt ended.
    """
    try:
        if cwd:
            try:
                os.chdir(cwd)  # the keeper's own directory: a spawned child starts there
            except OSError as exc:
                raise OSError(exc.errno, f"{exc.strerror}: working directory {cwd!r}") from None
        program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", os.defpath))
        if program is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            return os.posix_spawn(
                program,
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out, 1),
                    (os.POSIX_SPAWN_DUP2, err, 2),
                ],
                setsid=True,
                setsigmask=(),
                setsigdef=_DEFAULT_SIGNALS,
            )
        finally:
            os.close(out)
            os.close(err)
    except OSError as exc:
        raise NotStarted(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None


def send_all(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to the pipe ``fd``, then close it; False if its reader is gone."""
    try:
        while data:
            data = data[os.write(fd, data) :]
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def read_all(fd: int) -> bytes:
    """Everything until EOF, then close ``fd``."""
    chunks = []
    while True:
        data = os.read(fd, 4096)
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks)


def setup_agent(err_fd: int, cwd: str | None, stdout: str, stderr: str) -> None:
    """In the agent's process: own session, die with the keeper, stdio and working directory."""
    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, stdout), (2, stderr)):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror}: working directory {cwd!r}") from None
