"""Case workdirs and the ledger in each: where a run's files live and how the drill reads them."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from killdrill import ownership
from killdrill.drill.env import slug
from killdrill.drill.errors import STATE_DIR
from killdrill.drill.sweep import sweep_in_background, wait_for_sweep
from killdrill.fakes.existing import Existing
from killdrill.ledger import Ledger
from killdrill.records import LedgerSnapshot
from killdrill.verdict.baselines import LEDGER_MARKER

TMP_PATH_LIMIT = 72
"""Longest temporary folder given to a run's processes: a socket a program binds in a folder it
makes there (multiprocessing's ``pymp-XXXXXXXX/listener-XXXXXXXX``, 32 bytes more) must fit in
an ``AF_UNIX`` path (107 bytes: at most 75, 3 to spare)."""

ROOT_TEMP = ".killdrill-tmp"
"""The runs' temporary folders in the drill's root, when a workdir's own is too long a path
(claimed: a harness that dies leaves it to the next run's sweep, in a ``--root`` of the user's too;
the sweep removes only names of the drill's own)."""

TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP")
"""Where programs put their temporary files (Python's tempfile reads all three, Go and C TMPDIR)."""


@dataclass(frozen=True)
class RunContext:
    """Where one run lives: its workdir (files, ledger, control socket) and its thread (the key the
    agent checkpoints under).  A case's attempts share one; every clean run has its own."""

    workdir: Path
    thread: str

    @property
    def state(self) -> Path:
        """The harness's folder inside the workdir (plan, attempt logs, ledger, control socket)."""
        return self.workdir / STATE_DIR


class Workdirs:
    """The drill's root folder and one private workdir per run, each with its ledger: a SQLite
    file of its own, or the shared ``ledger_url`` (except for workdirs made private)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None,
        shared_ledger_url: str | None,
        existing: Existing | None = None,
    ) -> None:
        self._given_root = root
        self._existing = existing  # --existing: objects planted in every run's ledger before it starts
        self._shared = shared_ledger_url
        self._root: Path | None = None
        self._claim: str | None = None  # the made root's (killdrill.ownership)
        self._counter = 0
        self._lock = threading.Lock()
        self._private: set[str] = set()  # workdirs whose ledger stays their own SQLite file
        self._blank: bytes | None = None  # a new SQLite ledger: its schema and nothing else
        self._short_tmp: tuple[Path, str | None] | None = None  # the claimed folder of runs' short temp dirs
        self._left: set[Path] = set()  # a given root's workdirs not discarded (named if interrupted)

    @property
    def root(self) -> Path:
        """Where workdirs go.  Every workdir is private (0700): it holds plan.json with the
        ``--env`` values, the ledger and the agent's output.  A root we made is removed when
        the drill ends if nothing was kept in it; until then its harness owns it (a harness killed
        mid-drill leaves it to the next run's sweep, ``drill.sweep``)."""
        if self._root is None:
            with self._lock:  # cases started at once (--killdrill-workers) ask for it together
                if self._root is None:
                    sweep_in_background()
                    if self._given_root is not None:
                        # absolute: a service run from another folder (--cwd, or one that
                        # changes directory) is handed {workdir} paths under it
                        root = Path(self._given_root).absolute()
                        root.mkdir(mode=0o700, parents=True, exist_ok=True)
                        _GIVEN.add(self)
                    else:
                        root = Path(tempfile.mkdtemp(prefix="killdrill-"))
                        self._claim = ownership.claim(ownership.FOLDER, path=str(root))
                        _MADE.add(self)
                        weakref.finalize(self, finish_made_root, root, self._claim)
                    self._root = root  # only once it exists: another thread makes a workdir in it
        return self._root

    def temp_env(self, workdir: Path) -> dict[str, str]:
        """``TMPDIR``, ``TMP`` and ``TEMP`` of every process a run starts, so what they leave
        there (multiprocessing's ``pymp-*`` of an agent killed mid-run) goes with the run: the
        workdir's ``.killdrill/tmp``, removed with the workdir and swept with the root; or, when
        that path is too long for a socket bound under it (:data:`TMP_PATH_LIMIT`), a folder of
        the run's in a short one the drill claims in the system's temporary directory (removed
        with the run, swept by the next run when the harness died)."""
        if workdir == self._root:  # the fork template's: each agent forked from it gets its run's
            return {}
        tmp = workdir / STATE_DIR / "tmp"
        if len(os.fsencode(tmp)) > TMP_PATH_LIMIT:
            tmp = self._short_temp() / workdir.name.partition("-")[0]
        tmp.mkdir(mode=0o700, exist_ok=True)
        return dict.fromkeys(TEMP_VARIABLES, str(tmp))

    def _short_temp(self) -> Path:
        """The folder of the runs' short temporary folders: in the root (``.tmp``, gone with it;
        under pytest, inside the test's own folder) while its runs' paths fit, else a folder the
        drill claims in the system's temporary directory."""
        root = self.root  # made under the same lock
        with self._lock:
            if self._short_tmp is None:
                near = root / ROOT_TEMP
                if len(os.fsencode(near / f"{10**6:d}")) <= TMP_PATH_LIMIT:
                    claim = ownership.claim(ownership.FOLDER, path=str(near))
                    near.mkdir(mode=0o700, exist_ok=True)
                    path = str(near)
                else:
                    path = tempfile.mkdtemp(prefix="killdrill-tmp-")
                    claim = ownership.claim(ownership.FOLDER, path=path)
                self._short_tmp = (Path(path), claim)
                weakref.finalize(self, _remove_claimed, path, claim)
            return self._short_tmp[0]

    def close(self) -> None:
        """Remove the root we made if nothing was kept in it (once the workdirs given to
        :meth:`discard` are gone), and the runs' short temporary folder."""
        _REMOVER.wait()
        if self._short_tmp is not None:
            _remove_claimed(str(self._short_tmp[0]), self._short_tmp[1])
            self._short_tmp = None
        if self._root is not None and self._claim is not None:
            finish_made_root(self._root, self._claim)
        wait_for_sweep()

    def discard(self, workdir: Path) -> None:
        """Remove a finished run's workdir, off the case's critical path: renamed at once (its
        path is free and gone when this returns), deleted by a background thread.  Unlinking a
        case's files (its ledger's WAL: megabytes for a 1,000-effect case) was 2-3 ms of every
        case quiet, tens of ms on a loaded machine.  :meth:`close` and the interpreter's exit wait
        for the deletions."""
        _REMOVER.remove(workdir, claimed=self._claim is None)  # a made root is swept whole
        self._left.discard(workdir)
        if self._short_tmp is not None:  # the run's temporary folder outside it, if it had one
            short = self._short_tmp[0] / workdir.name.partition("-")[0]
            if short.exists():
                _REMOVER.remove(short)

    def new(self, label: str) -> Path:
        """A fresh private workdir named after ``label``, with its state folder.  A name already
        in the root is never reused: another drill on the same root (two processes, or a run
        before) keeps its workdirs; before, the later drill removed them, cases still running."""
        while True:
            with self._lock:
                self._counter += 1
                n = self._counter
            wd = self.root / f"{n:03d}-{slug(label)}"
            try:
                wd.mkdir(mode=0o700)
            except FileExistsError:
                continue
            break
        os.chmod(wd, 0o700)  # whatever the umask
        (wd / STATE_DIR).mkdir(mode=0o700)
        if self._claim is None:  # the user's root: no sweep removes it, so it is named if left
            with self._lock:
                self._left.add(wd)
        return wd

    @contextlib.contextmanager
    def private_ledger(self, workdir: Path) -> Iterator[None]:
        """While inside, ``workdir`` keeps its own SQLite ledger even with a shared ``ledger_url``
        (a shared ledger must never see two runs of one thread)."""
        self._private.add(str(workdir))
        try:
            yield
        finally:
            self._private.discard(str(workdir))

    def ledger_url(self, workdir: Path) -> str:
        if self._shared and str(workdir) not in self._private:
            return self._shared
        return str(workdir / STATE_DIR / "ledger.sqlite")

    @contextlib.contextmanager
    def ledger(self, run: RunContext, read_only: bool = False, durable: bool = True) -> Iterator[Ledger]:
        """The run's ledger, open for one read or write.  Nothing keeps it open while an attempt
        runs: the agent may delete, truncate or rewrite its files (a connection that maps a
        truncated ``-shm`` file dies of SIGBUS).  ``read_only``: a connection that cannot write,
        so its close copies no WAL into the file, with an fsync (a tenth of a 1,000-effect case's
        harness time); only for a ledger the case made (its marker).  ``durable``:
        see ``Ledger``."""
        url = self.ledger_url(run.workdir)
        ledger = Ledger(url, run.thread, read_only=read_only, durable=durable)
        try:
            yield ledger
        finally:
            if url != self._shared:
                ledger.close()  # one SQLite file per case: keep no file open once it is read

    def snapshot(self, run: RunContext) -> LedgerSnapshot:
        """The run's ledger, with its thread id and workdir written as ``{thread}``/``{workdir}``.

        Agents put the thread into refs and keys (rightly: it is what makes them stable);
        every case has its own thread, so without this a ref would look different in
        every case and the baseline could never be compared with it.
        """
        with self.ledger(run) as ledger:
            return ledger.snapshot(written_as=self.written_as(run))

    def snapshot_and_mark(
        self, run: RunContext, mark: str, since: LedgerSnapshot | None = None
    ) -> tuple[LedgerSnapshot, bool]:
        """After an attempt: the snapshot (as :meth:`snapshot`; ``since``, the one read after
        the attempt before: see ``Ledger.snapshot``), and whether the case's marker is still
        there."""
        url = self.ledger_url(run.workdir)
        if url != self._shared and not os.path.isfile(url):  # the agent deleted it
            return LedgerSnapshot(), False
        with self.ledger(run, read_only=True) as ledger:
            snap = ledger.snapshot(since, written_as=self.written_as(run))
            return snap, ledger.settings(LEDGER_MARKER).get("mark") == mark

    def mark(self, run: RunContext, mark: str) -> None:
        """Write the case's marker into its ledger before attempt 1 (see ``baselines.ledger_break``).

        A case's own SQLite ledger starts as a copy of the first one this drill made, with its
        schema and nothing else, and the marker is written without an fsync: making the schema
        and the two fsyncs of a durable write were 3 of a 1,000-effect case's ~40 ms of harness
        time.  Only the harness has the file then; the attempts' writes are durable."""
        url = self.ledger_url(run.workdir)
        own = url != self._shared
        if own:
            self._from_blank(Path(url), run.thread)
        with self.ledger(run, durable=not own) as ledger:
            ledger.configure(LEDGER_MARKER, mark=mark)
            if self._existing is not None:
                self._existing.plant(ledger)

    def plant(self, run: RunContext) -> None:
        """Put the drill's existing objects (``--existing``) into a clean run's new ledger."""
        if self._existing is None:
            return
        url = self.ledger_url(run.workdir)
        if url != self._shared and not os.path.isfile(url):
            self._from_blank(Path(url), run.thread)
        with self.ledger(run) as ledger:
            self._existing.plant(ledger)

    def _from_blank(self, path: Path, thread: str) -> None:
        """A new ledger at ``path``: the blank copied, or made here and kept as the blank."""
        blank = self._blank
        if blank is not None:
            path.write_bytes(blank)
            return
        Ledger(path, thread).close()  # the schema; the close checkpoints it into the file
        if not Path(f"{path}-wal").exists():  # else not all of it is in the file: no blank
            self._blank = path.read_bytes()

    @staticmethod
    def written_as(run: RunContext) -> dict[str, str]:
        """What a read of ``run``'s ledger writes back as placeholders: its thread and workdir."""
        return {run.thread: "{thread}", str(run.workdir): "{workdir}"}


class _Remover:
    """Deletes folders in one background thread of the process, which looks for work every
    half second: a case hands a folder over without waking anything (a queue's notify switched
    threads on every case: ~7 ms at load 19 in a fork drill's cProfile).  :meth:`wait` (a
    drill's close, the interpreter's exit) wakes it and waits until all is deleted."""

    INTERVAL_S = 0.5

    def __init__(self) -> None:
        self._pending: list[tuple[Path, str]] = []  # each folder with its claim
        self._busy = 0  # folders taken but not deleted yet
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)
        atexit.register(self.wait)

    def remove(self, path: Path, claimed: bool = False) -> None:
        """``claimed``: the folder is claimed until deleted, so a harness killed mid-deletion
        leaves it to the next run's sweep (in a root the user gave; a made root is swept whole)."""
        # not uuid4: a thread id's source (a test that picks the drill's threads replaces it)
        trash = path.with_name(f".removing-{secrets.token_hex(6)}")
        claim = ownership.claim(ownership.FOLDER, path=str(trash)) if claimed else ""
        try:
            os.rename(path, trash)
        except OSError:  # gone already, or cannot be moved: remove it here
            shutil.rmtree(path, ignore_errors=True)
            if claim:
                ownership.release(claim)
            return
        with self._lock:
            self._pending.append((trash, claim))
            start = self._thread is None
            if start:
                self._thread = threading.Thread(target=self._run, name="killdrill-remover", daemon=True)
        if start:
            assert self._thread is not None
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.INTERVAL_S)
            self._wake.clear()
            with self._lock:
                todo, self._pending = self._pending, []
                self._busy += len(todo)
            for path, claim in todo:
                shutil.rmtree(path, ignore_errors=True)
                if claim:
                    ownership.release(claim)
            with self._lock:
                self._busy -= len(todo)
                self._done.notify_all()

    def wait(self) -> None:
        """Until every folder given so far is deleted."""
        with self._lock:
            if self._thread is None:
                return
            while self._pending or self._busy:
                self._wake.set()
                self._done.wait(0.1)

    def _after_fork_in_child(self) -> None:
        # the thread is not in a forked child, and the folders queued are the parent's to delete
        self._pending, self._busy = [], 0
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._thread = None


_REMOVER = _Remover()


_MADE: weakref.WeakSet[Workdirs] = weakref.WeakSet()
_GIVEN: weakref.WeakSet[Workdirs] = weakref.WeakSet()


def unfinished_roots() -> list[Path]:
    """The roots this process made that hold workdirs now (an interrupted drill names them:
    every folder kept is named)."""
    _REMOVER.wait()
    roots = [w._root for w in list(_MADE) if w._root is not None]
    return [r for r in roots if r.is_dir() and any(r.iterdir())]


def workdirs_left_in_given_roots() -> list[Path]:
    """The workdirs this process made in roots the user gave that are still there (kept, or
    cut short by an interrupt): no sweep removes them, so an interrupted drill names each."""
    _REMOVER.wait()
    return sorted(wd for w in list(_GIVEN) for wd in list(w._left) if wd.is_dir())


def _remove_claimed(path: str, claim: str | None) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if claim is not None:
        ownership.release(claim)


def finish_made_root(root: Path, claim: str) -> None:
    """A made root at the drill's end (or the interpreter's exit): removed if nothing was kept
    in it, else handed from its owner to the kept list (bounded: ``ownership.KEEP_LIMIT``)."""
    remove_when_emptied(root)
    if root.exists():
        ownership.keep(root)
    ownership.release(claim)


def remove_when_emptied(root: Path) -> None:
    """Remove ``root`` if it is empty once the background deletions are done (the ``.removing-*``
    folders of discarded workdirs would keep it): a made root at the drill's end or the
    interpreter's exit, the pytest plugin's discovery folder."""
    _REMOVER.wait()
    rmdir_if_empty(root)


def rmdir_if_empty(path: Path) -> None:
    """Remove ``path`` if it is an empty directory (kept workdirs keep it)."""
    try:
        path.rmdir()
    except OSError:
        pass
