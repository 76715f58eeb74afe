"""Discovery: the clean runs of a command, its kill-point catalogue and the baseline ledger."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import uuid
from dataclasses import replace
from pathlib import Path

from killdrill.drill.base import DrillSetup
from killdrill.drill.db_effects import with_rows
from killdrill.drill.deployment_catalogue import catalogue_has, clean_failure, merged
from killdrill.drill.errors import DiscoveryError, UnknownPointError
from killdrill.drill.setup_checks import (
    diverged_hint,
    fixed_thread_hint,
    imported_modules,
    integration_hint,
    placeholder_hint,
    warn,
)
from killdrill.drill.shared_state import (
    check_integrations,
    fixed_paths,
    shared_path_hint,
    shared_state_error,
)
from killdrill.drill.thread_view import interrupts_at_exit
from killdrill.drill.topology import DRIVER
from killdrill.drill.workdirs import RunContext
from killdrill.errors import HarnessError, UsageError
from killdrill.ledger import LedgerError
from killdrill.options import NO_ANSWER, OPTIONS
from killdrill.points import Schedule, occurrence_label
from killdrill.process.forks import TemplateError
from killdrill.records import (
    EXITED,
    PER_THREAD_BASELINE,
    SHARED_BASELINE,
    Attempt,
    AttemptOutcome,
    CatalogueEntry,
    CleanRun,
    Discovery,
    LedgerSnapshot,
)
from killdrill.verdict import volatile_fields
from killdrill.verdict.baselines import workload_difference
from killdrill.verdict.model_work import unscripted_line


class Discoverer:
    """A command's catalogue and baseline: discovered once by clean runs, or reused."""

    def __init__(self, setup: DrillSetup) -> None:
        self.setup = setup
        self.command = setup.command
        self.options = setup.options
        self.workdirs = setup.workdirs
        self._discovery: Discovery | None = None
        self._imported: set[str] = set()  # watched modules the clean runs imported (setup_checks)

    def clean_run(self, thread: str, label: str, *, private: bool = False) -> tuple[Attempt, LedgerSnapshot]:
        """One unarmed, traced run under ``thread`` in a fresh workdir (with its own SQLite ledger
        when ``private``, so a shared ``ledger_url`` never sees two runs of one thread)."""
        workdir = self.workdirs.new(label)
        run = RunContext(workdir, thread)
        with self.workdirs.private_ledger(workdir) if private else contextlib.nullcontext():
            self.workdirs.plant(run)  # --existing: the objects the agent expects to find
            try:
                if self.setup.topology is not None:  # every process's points, the services' named
                    deployed = self.setup.deploy(run, Schedule(()), 1, detect=True)
                    attempt = merged(deployed.attempts, deployed.started)
                    failed = clean_failure(deployed)  # said of the process that failed
                    if deployed.violations:
                        attempt = replace(attempt, returncode=attempt.returncode or 1)
                else:
                    attempt = self.setup.launch(run, [self.setup.spec(run, 1, None, detect=True)])[0]
                    failed = None
                # the agent's own rows, read before the release drops its schema
                ok = attempt.outcome == EXITED and attempt.returncode == 0
                rows = self.setup.effect_rows.read(run, clean=True) if ok else []
            except (TemplateError, HarnessError, UsageError):
                # the agent never started, or the harness could not run it (a broker that does not
                # answer, a service never ready, an integration's option refused when its service
                # starts: said in the error): no folder left behind unprinted
                shutil.rmtree(workdir, ignore_errors=True)
                raise
            finally:
                self.setup.release(run)
            self._imported |= imported_modules(run.state)
            if attempt.outcome == EXITED:
                self._check_answered(workdir)  # exit 0, or a driver that failed asking a person
            if attempt.outcome != EXITED or attempt.returncode != 0:
                how = (
                    f"hung for {self.options.timeout:g}s"
                    if attempt.outcome == AttemptOutcome.HANG
                    else f"exited {attempt.returncode}"
                )
                err = attempt.stderr_tail.strip() or "(no stderr)"
                heading = "--- stderr (tail) ---\n"
                if failed is not None:  # a deployment: the process that failed, its stderr
                    how = f"failed: {failed[0]}" if failed[0] else how
                    heading, err = "", failed[1]
                warn(integration_hint(self._imported, self.options.integrations))
                model = self._unscripted(run)
                raise DiscoveryError(
                    f"the clean run of {shlex.join(self.command)} {how}{f': {model}' if model else ''}; "
                    f"workdir kept at {workdir}\n{heading}{err}"
                )
            snap = with_rows(self.workdirs.snapshot(run), rows)
            warn(unscripted_line(snap))
        if not self.options.keep:
            self.workdirs.discard(workdir)
        return attempt, snap

    def _unscripted(self, run: RunContext) -> str | None:
        """The one line saying a failed clean run asked the model fake with no script, if it did."""
        try:
            return unscripted_line(self.workdirs.snapshot(run))
        except (LedgerError, OSError, ValueError):
            return None  # no readable ledger: the failure speaks for itself

    def _check_answered(self, workdir: Path) -> None:
        """A clean run that stopped at an interrupt nobody answered is a one-line usage error: not a
        pass (a drill of a run that stops before its work judges nothing), not the traceback of a
        driver whose ``input()`` found no person."""
        waiting = interrupts_at_exit(workdir, 1)
        if not waiting:
            return
        node, value, kind = waiting[0]
        given = len(self.options.answer)
        after = f", after the {given} answer{'s' if given > 1 else ''} given" if given else ""
        where = f"{kind} {node!r} asks {value}{after}"
        command = shlex.join(self.command)
        raise NO_ANSWER.error(self.options, self.options.spelled, OPTIONS, command=command, interrupt=where)

    def discover(self, *, force: bool = False) -> Discovery:
        """Run the command clean (traced, unarmed): the kill-point catalogue and the baseline.

        Two clean runs under two threads tell volatile fields apart.  When they did different
        work (effect counts, points reached) the work depends on the thread: a third clean run,
        under the first run's thread, names the volatile fields instead (one extra run, only
        then), and each case runs under the thread of a clean run that reached its point.
        """
        if self._discovery is not None and not force:
            return self._discovery
        check_integrations(self.options.integrations)  # an unknown name: exit 2 before any run
        before = fixed_paths(self.command, self.options.cwd)  # files the runs may share outside workdirs
        runs: list[tuple[str, Attempt, LedgerSnapshot]] = []
        for i in range(max(1, self.options.discovery_runs)):
            thread = f"kd-discovery-{uuid.uuid4().hex[:10]}"
            attempt, snap = self.clean_run(thread, f"discovery-{i + 1}")
            runs.append((thread, attempt, snap))
        first = runs[0][1]
        warn(integration_hint(self._imported, self.options.integrations))
        warn(placeholder_hint(self.command))
        if not first.trace and (
            err := shared_state_error(before, self.options.cwd, found_nothing=True, differed="")
        ):
            raise err
        if not first.trace:
            shared = " (or it found a finished run: the command has no {workdir} or {thread})"
            raise DiscoveryError(
                f"the clean run of {shlex.join(self.command)} reached no kill point: mark its steps with "
                "killdrill.node(...) / killdrill.boundary(...), use the fakes, or enable an integration"
                + (shared if placeholder_hint(self.command) else "")
            )

        def labels(a: Attempt) -> list[str]:
            return [e.label for e in a.trace]

        catalogue = tuple(CatalogueEntry(e.label, e.point, e.occurrence, e.t_ms) for e in first.trace)
        volatile: dict[str, list[str]] = {}
        mode, reason = SHARED_BASELINE, ""
        differ = ""
        for _, other, snap in runs[1:]:
            differ = differ or workload_difference(labels(first), runs[0][2], labels(other), snap)
        if differ and (
            err := shared_state_error(before, self.options.cwd, found_nothing=False, differed=differ)
        ):
            raise err
        warn(fixed_thread_hint(self.command))
        warn(shared_path_hint(before, self.options.cwd))  # the runs agree: it may be a log file
        if len(runs) == 1:
            reason = "one clean run: thread dependence not checked"
        elif not differ:
            reason = f"{len(runs)} clean runs under different threads did the same work"
            volatile = volatile_fields(runs[0][2], runs[1][2])
        else:
            if self.options.ledger_url:
                raise DiscoveryError(
                    f"the work of {shlex.join(self.command)} depends on its thread ({differ}): each case "
                    "must run under a clean run's thread, which a shared --ledger-url cannot hold twice"
                )
            mode = PER_THREAD_BASELINE
            reason = f"the clean runs under two threads did different work: {differ}"
            same_thread, same = self.clean_run(runs[0][0], "discovery-same-thread")
            # Fewer points under another thread may be the thread's work; fewer under the same
            # thread in a fresh workdir is state kept outside it.
            warn(diverged_hint(self.command, len(first.trace), len(same_thread.trace)))
            volatile = volatile_fields(runs[0][2], same)
            again = workload_difference(labels(first), runs[0][2], labels(same_thread), same)
            if again:
                reason += f"; two runs of one thread differ too ({again}): the agent is not deterministic"
        self._discovery = Discovery(
            command=self.command,
            catalogue=catalogue,
            baseline=runs[0][2],
            volatile=volatile,
            duration_ms=first.duration_ms,
            mode=mode,
            mode_reason=reason,
            runs=tuple(
                CleanRun(t, tuple(CatalogueEntry(e.label, e.point, e.occurrence, e.t_ms) for e in a.trace), b)
                for t, a, b in runs
            )
            if mode == PER_THREAD_BASELINE
            else (),
        )
        return self._discovery

    def use_discovery(self, discovery: Discovery) -> None:
        """Reuse a discovery made earlier (the pytest plugin caches it across sessions)."""
        self._discovery = discovery

    def points(self) -> list[str]:
        """The catalogue's labels, in the order a clean run reached them."""
        return self.discover().labels()

    def check_schedule(self, schedule: Schedule) -> None:
        """The first named kill must be in the catalogue; later ones may be resume-only points."""
        catalogue = self.discover().labels()
        if not schedule.faults:
            return
        first = schedule.faults[0]
        if first.point is not None:
            label = occurrence_label(first.point, first.occurrence)
            if first.process is not None and first.process != DRIVER:
                label = f"{first.process}:{label}"
            entries = self.discover().catalogue
            deployed = self.setup.topology is not None and catalogue_has(entries, label)
            if label not in catalogue and not deployed:
                raise UnknownPointError(str(first), catalogue)
