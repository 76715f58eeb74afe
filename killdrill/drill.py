"""A drill: discover a command's kill points, then run cases that kill and resume it.

Data flow of one case (DESIGN.md): a fresh workdir; attempt 1 armed with the schedule's
first kill; attempts 2..k resumed with the same thread id and workdir (the next kill,
or none); an optional between-attempts command; then the verdict of the case's ledger
against the baseline ledger of a clean run, and a report with a one-line reproduction.

A case also proves that it tested something: the kill landed where it was scheduled
(``point_not_reached`` otherwise, never a pass), and a resume that re-entered at the
very first boundary after progress had been made is flagged ``resumed_from_start``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from killdrill.intervals import resolve_schedule
from killdrill.points import Kill, Schedule, ScheduleError, occurrence_label, parse_schedule
from killdrill.records import (
    EXITED,
    HANG,
    HARNESS_ERROR,
    HARNESS_FAILED,
    KILLED,
    MISSING_EFFECT,
    NOT_REACHED,
    PER_THREAD_BASELINE,
    POINT_NOT_REACHED,
    RESUME_FAILED,
    SHARED_BASELINE,
    TIMED_OUT,
    UNEXPECTED_EFFECT,
    Attempt,
    CaseResult,
    CatalogueEntry,
    CleanRun,
    Discovery,
    DrillResult,
    ExactlyOnceViolation,
    LedgerSnapshot,
    Violation,
)
from killdrill.setup_checks import (
    detection_env,
    diverged_hint,
    imported_modules,
    integration_hint,
    placeholder_hint,
    warn,
)
from killdrill.supervisor import HarnessError, LaunchSpec, Running, Supervisor

__all__ = [
    "CaseResult",
    "DiscoveryError",
    "Drill",
    "DrillOptions",
    "DrillResult",
    "ExactlyOnceViolation",
    "HarnessError",
    "UnknownPointError",
    "discover",
    "run",
]

STATE_DIR = ".killdrill"
"""Inside each workdir: the ledger, the plan, attempt logs and the control socket."""


class DiscoveryError(HarnessError):
    """The clean run failed or reached no kill point: nothing can be drilled."""


class UnknownPointError(HarnessError, ScheduleError):
    """A scheduled point that the clean run never reached; the message lists the catalogue."""

    def __init__(self, text: str, catalogue: Sequence[str]) -> None:
        import difflib

        shown = ", ".join(catalogue[:40]) + (" ..." if len(catalogue) > 40 else "")
        close = difflib.get_close_matches(text.split("+")[0].split("~")[0], catalogue, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        ScheduleError.__init__(self, text, f"not reached by a clean run; {hint}the catalogue is: {shown}")


@dataclass(frozen=True)
class DrillOptions:
    """How cases are run.  Every field has a CLI flag and a pytest ini key of the same name."""

    root: str | os.PathLike[str] | None = None  # where workdirs go (default: a new temp dir)
    timeout: float = 60.0  # seconds per attempt; a hang is a verdict
    max_attempts: int | None = None  # default: kills in the schedule + 3
    identity: Mapping[str, Sequence[str]] = field(default_factory=dict)  # "payments.charge": [fields]
    http_fakes: bool = False
    smtp_fake: bool = False  # an SMTP server on 127.0.0.1 (KILLDRILL_SMTP): messages are mailbox.send
    hooks: Mapping[str, str] = field(default_factory=dict)  # /hooks route pattern -> "keyed" | "naive"
    hook_key_header: str = "Idempotency-Key"  # where the /hooks sink reads a request's key
    between: Sequence[str] | None = None  # command run between attempts (reconciliation)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    keep: bool = False  # keep passing workdirs too
    signal: str = "KILL"  # "TERM": drain drills (SIGTERM, SIGKILL after `grace`)
    grace: float = 5.0
    integrations: tuple[str, ...] = ()  # e.g. ("langgraph",)
    discovery_runs: int = 2  # two clean runs tell legitimately volatile fields apart
    ledger_url: str | None = None  # a shared SQLAlchemy URL instead of a SQLite file per case
    resumers: int = 1  # concurrent resumers after the first kill
    barrier: str | None = None  # with resumers: only this point is a barrier (default: all)
    workers: int = 1  # cases run in parallel by run_all
    launcher: str = "spawn"  # "fork": attempts forked from a warm template (killdrill.launcher)
    preload: tuple[str, ...] = ()  # modules the fork template imports once (beyond killdrill's own)
    checks: tuple[str, ...] = ()  # opt-in verdict checks, e.g. ("compensation_order",)
    model_script: str | None = None  # serve a scripted model on the HTTP fakes (fakes/model_script.py)
    model_variance: int | None = None  # a seed: each attempt gets other wording, tool-call ids, $vary values


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.#+~-]+", "_", text)[:60].strip("_") or "case"


def _fill(argv: Sequence[str], thread: str, workdir: str) -> list[str]:
    return [a.replace("{thread}", thread).replace("{workdir}", workdir) for a in argv]


def _resolve(argv: Sequence[str]) -> list[str]:
    """Check the command exists; ``python``/``python3`` mean the interpreter running killdrill."""
    if not argv:
        raise HarnessError("no command given: put the agent's command after --")
    argv = list(argv)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    elif os.sep not in argv[0] and shutil.which(argv[0]) is None:
        raise HarnessError(f"command not found: {argv[0]}")
    elif os.sep in argv[0] and not os.access(argv[0], os.X_OK):
        raise HarnessError(f"command not found or not executable: {argv[0]}")
    return argv


def _bootstrap_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")


class Drill:
    """Drills one command.  ``discover()`` once, then ``run_case(schedule)`` per case.

    The command is a list (never run through a shell); ``{thread}`` and ``{workdir}`` are
    filled in each argument.
    """

    def __init__(self, command: Sequence[str], options: DrillOptions | None = None, **overrides: Any) -> None:
        self.command = tuple(command)
        self.options = replace(options or DrillOptions(), **overrides)
        self._argv = _resolve(self.command)
        self._discovery: Discovery | None = None
        self._root: Path | None = None
        self._counter = 0
        self._lock = threading.Lock()
        self._launcher: Any = None
        self._private_ledgers: set[str] = set()  # workdirs whose ledger stays their own SQLite file
        self._imported: set[str] = set()  # watched modules the clean runs imported (setup_checks)
        from killdrill.verdict import CHECKS

        unknown = [c for c in self.options.checks if c not in CHECKS]
        if unknown:
            raise HarnessError(f"unknown check {unknown[0]!r}: expected one of {', '.join(CHECKS)}")
        if self.options.launcher not in ("spawn", "fork"):
            raise HarnessError(f"unknown launcher {self.options.launcher!r}: expected spawn or fork")
        self._model = self._load_model()
        if self.options.launcher == "fork":
            from killdrill.launcher import python_target

            if not python_target(self._argv):
                raise HarnessError(
                    "--launcher fork needs a `python -m MODULE ...` or `python SCRIPT ...` command"
                )

    def _load_model(self) -> Any:
        """The model fake of this drill, its script read and checked now (one line if it is wrong)."""
        if self.options.model_script is None:
            if self.options.model_variance is not None:
                raise HarnessError("--model-variance needs --model-script FILE (the model fake's script)")
            return None
        from killdrill.fakes.model import ModelFake
        from killdrill.fakes.model_script import ScriptError, load_script

        try:
            script = load_script(os.path.abspath(self.options.model_script))
        except ScriptError as exc:
            raise HarnessError(str(exc)) from None
        return ModelFake(script, self.options.model_variance)

    def _get_launcher(self) -> Any:
        """The fork template, started on first use and closed with the drill (or at exit)."""
        if self.options.launcher != "fork":
            return None
        with self._lock:
            if self._launcher is None:
                import weakref

                from killdrill.launcher import DEFAULT_PRELOAD, Launcher

                preload = [*DEFAULT_PRELOAD, *self.options.preload]
                if "langgraph" in self.options.integrations:
                    preload.append("langgraph.graph")
                env = detection_env(
                    self._env(self.root, "kd-template"), self.options.integrations, _bootstrap_dir()
                )
                self._launcher = Launcher(
                    self._argv[0], preload=preload, env=env, cwd=self.options.cwd
                ).start()
                weakref.finalize(self, self._launcher.close)
            return self._launcher

    def close(self) -> None:
        """Stop the fork template, if any (it also stops by itself when the harness exits);
        remove the root we made if nothing was kept in it."""
        if self._launcher is not None:
            self._launcher.close()
            self._launcher = None
        if self._root is not None and self.options.root is None:
            _rmdir_if_empty(self._root)

    def __enter__(self) -> Drill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- workdirs -------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """Where workdirs go.  Every workdir is private (0700): it holds plan.json with the
        ``--env`` values, the ledger and the agent's output.  A root we made is removed when
        the drill ends if nothing was kept in it."""
        if self._root is None:
            if self.options.root is not None:
                self._root = Path(self.options.root)
                self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
            else:
                self._root = Path(tempfile.mkdtemp(prefix="killdrill-"))
                import weakref

                weakref.finalize(self, _rmdir_if_empty, self._root)
        return self._root

    def _new_workdir(self, label: str) -> Path:
        with self._lock:
            self._counter += 1
            n = self._counter
        wd = self.root / f"{n:03d}-{_slug(label)}"
        if wd.exists():
            shutil.rmtree(wd)
        wd.mkdir(mode=0o700)
        os.chmod(wd, 0o700)  # whatever the umask
        (wd / STATE_DIR).mkdir(mode=0o700)
        return wd

    def _ledger_url(self, workdir: Path) -> str:
        if self.options.ledger_url and str(workdir) not in self._private_ledgers:
            return self.options.ledger_url
        return str(workdir / STATE_DIR / "ledger.sqlite")

    def _snapshot(self, workdir: Path, thread: str) -> LedgerSnapshot:
        """The case's ledger, with its thread id and workdir written as ``{thread}``/``{workdir}``.

        Agents put the thread into refs and keys (rightly: it is what makes them stable);
        every case has its own thread, so without this a ref would look different in
        every case and the baseline could never be compared with it.
        """
        from killdrill.ledger import Ledger

        ledger = Ledger(self._ledger_url(workdir), thread)
        try:
            snap = ledger.snapshot()
        finally:
            if self._ledger_url(workdir) != self.options.ledger_url:
                ledger.close()  # one SQLite file per case: keep no file open once it is read
        return _normalize(snap, {thread: "{thread}", str(workdir): "{workdir}"})

    def _mark_ledger(self, workdir: Path, thread: str, mark: str) -> None:
        """Write the case's marker into its ledger before attempt 1 (see :func:`ledger_break`)."""
        from killdrill.baselines import LEDGER_MARKER
        from killdrill.ledger import Ledger

        ledger = Ledger(self._ledger_url(workdir), thread)
        try:
            ledger.configure(LEDGER_MARKER, mark=mark)
        finally:
            if self._ledger_url(workdir) != self.options.ledger_url:
                ledger.close()

    def _ledger_marked(self, workdir: Path, thread: str, mark: str) -> bool:
        from killdrill.baselines import LEDGER_MARKER
        from killdrill.ledger import Ledger

        ledger = Ledger(self._ledger_url(workdir), thread)
        try:
            return ledger.settings(LEDGER_MARKER).get("mark") == mark
        finally:
            if self._ledger_url(workdir) != self.options.ledger_url:
                ledger.close()

    # ---- launching ------------------------------------------------------------------------
    def _env(self, workdir: Path, thread: str) -> dict[str, str]:
        env = dict(os.environ)
        for var in [k for k in env if k.startswith("KILLDRILL_")]:
            del env[var]  # never inherit an outer drill's channel
        env.update(self.options.env)
        env.update(
            KILLDRILL_THREAD=thread,
            KILLDRILL_WORKDIR=str(workdir),
            KILLDRILL_LEDGER=self._ledger_url(workdir),
        )
        if self.options.integrations:
            env["KILLDRILL_INTEGRATIONS"] = ",".join(self.options.integrations)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [_bootstrap_dir(), env.get("PYTHONPATH")]))
        return env

    def _spec(
        self,
        workdir: Path,
        thread: str,
        number: int,
        kill: Kill | None,
        suffix: str = "",
        detect: bool = False,
    ) -> LaunchSpec:
        state = workdir / STATE_DIR
        env = self._env(workdir, thread)
        return LaunchSpec(
            argv=_fill(self._argv, thread, str(workdir)),
            env=detection_env(env, self.options.integrations, _bootstrap_dir()) if detect else env,
            cwd=self.options.cwd,
            stdout_path=str(state / f"attempt-{number}{suffix}.stdout"),
            stderr_path=str(state / f"attempt-{number}{suffix}.stderr"),
            number=number,
            kill=kill,
            timeout_s=self.options.timeout,
            signal_name=self.options.signal,
            grace_s=self.options.grace,
            control_dir=str(state / "ctl"),
            launcher=self._get_launcher(),
        )

    def _launch(self, workdir: Path, thread: str, specs: list[LaunchSpec], hook: Any = None) -> list[Attempt]:
        """Run ``specs`` at once under one supervisor, with the HTTP fakes around them if asked."""
        servers: list[Any] = []
        if self.options.http_fakes or self._model is not None:
            from killdrill.fakes.http import FakesServer

            wire = {"hooks": {"routes": dict(self.options.hooks), "key_header": self.options.hook_key_header}}
            http = FakesServer(self._ledger_url(workdir), wire=wire, model=self._model)
            servers.append(http)
            url = http.start()
            for spec in specs:
                spec.env = {**spec.env, "KILLDRILL_FAKES_URL": url, "KILLDRILL_FAKES_SECRET": http.secret}
                if self._model is not None:
                    spec.env.update(_model_env(url))
        if self.options.smtp_fake:
            from killdrill.fakes.wire.smtp import SmtpFake

            smtp = SmtpFake(self._ledger_url(workdir))
            servers.append(smtp)
            address = smtp.start()
            for spec in specs:
                spec.env = {**spec.env, "KILLDRILL_SMTP": address}
        on_start: Callable[[Running], None] | None = None
        if servers:

            def on_start(run: Running) -> None:
                for server in servers:
                    server.bind(thread, run.spec.number, run.listener.address, run.listener.token)
                    if hasattr(server, "arm"):
                        server.arm(run)  # a drop:/reset: connection fault of this attempt

        for spec in specs:
            spec.env = _expand_env(spec.env, self.options.env)
        supervisor = Supervisor(on_attempt_start=on_start, boundary_hook=hook)
        if hook is not None and hasattr(hook, "bind"):
            hook.bind(supervisor)
        try:
            return supervisor.run_many(specs)
        finally:
            for server in servers:
                server.stop()

    # ---- discovery ------------------------------------------------------------------------
    def _clean_run(self, thread: str, label: str, *, private: bool = False) -> tuple[Attempt, LedgerSnapshot]:
        """One unarmed, traced run under ``thread`` in a fresh workdir (with its own SQLite ledger
        when ``private``, so a shared ``ledger_url`` never sees two runs of one thread)."""
        workdir = self._new_workdir(label)
        if private:
            self._private_ledgers.add(str(workdir))
        try:
            attempt = self._launch(workdir, thread, [self._spec(workdir, thread, 1, None, detect=True)])[0]
            self._imported |= imported_modules(workdir / STATE_DIR)
            if attempt.outcome != EXITED or attempt.returncode != 0:
                how = (
                    f"hung for {self.options.timeout:g}s"
                    if attempt.outcome == TIMED_OUT
                    else f"exited {attempt.returncode}"
                )
                err = attempt.stderr_tail.strip() or "(no stderr)"
                warn(integration_hint(self._imported, self.options.integrations))
                raise DiscoveryError(
                    f"the clean run of {shlex.join(self.command)} {how}; workdir kept at {workdir}\n"
                    f"--- stderr (tail) ---\n{err}"
                )
            snap = self._snapshot(workdir, thread)
        finally:
            self._private_ledgers.discard(str(workdir))
        if not self.options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        return attempt, snap

    def discover(self, *, force: bool = False) -> Discovery:
        """Run the command clean (traced, unarmed): the kill-point catalogue and the baseline.

        Two clean runs under two threads tell volatile fields apart.  When they did different
        work (effect counts, points reached) the work depends on the thread: a third clean run,
        under the first run's thread, names the volatile fields instead (one extra run, only
        then), and each case runs under the thread of a clean run that reached its point.
        """
        if self._discovery is not None and not force:
            return self._discovery
        from killdrill.baselines import workload_difference
        from killdrill.verdict import volatile_fields

        runs: list[tuple[str, Attempt, LedgerSnapshot]] = []
        for i in range(max(1, self.options.discovery_runs)):
            thread = f"kd-discovery-{uuid.uuid4().hex[:10]}"
            attempt, snap = self._clean_run(thread, f"discovery-{i + 1}")
            runs.append((thread, attempt, snap))
        first = runs[0][1]
        warn(integration_hint(self._imported, self.options.integrations))
        warn(placeholder_hint(self.command))
        if not first.trace:
            shared = " (or it found a finished run: the command has no {workdir} or {thread})"
            raise DiscoveryError(
                f"the clean run of {shlex.join(self.command)} reached no kill point: mark its steps with "
                "killdrill.node(...) / killdrill.boundary(...), use the fakes, or enable an integration"
                + (shared if placeholder_hint(self.command) else "")
            )
        if len(runs) > 1:
            warn(diverged_hint(self.command, len(first.trace), len(runs[1][1].trace)))

        def labels(a: Attempt) -> list[str]:
            return [e.label for e in a.trace]

        catalogue = tuple(CatalogueEntry(e.label, e.point, e.occurrence, e.t_ms) for e in first.trace)
        volatile: dict[str, list[str]] = {}
        mode, reason = SHARED_BASELINE, ""
        differ = ""
        for _, other, snap in runs[1:]:
            differ = differ or workload_difference(labels(first), runs[0][2], labels(other), snap)
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
            same_thread, same = self._clean_run(runs[0][0], "discovery-same-thread")
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

    # ---- cases ----------------------------------------------------------------------------
    def check_schedule(self, schedule: Schedule) -> None:
        """The first named kill must be in the catalogue; later ones may be resume-only points."""
        catalogue = self.discover().labels()
        if not schedule.kills:
            return
        first = schedule.kills[0]
        if first.point is not None:
            label = occurrence_label(first.point, first.occurrence)
            if label not in catalogue:
                raise UnknownPointError(str(first), catalogue)

    def reproduce_line(self, schedule: str, *, thread: str | None = None) -> str:
        o, d = self.options, DrillOptions()
        args = ["killdrill", "run", "--schedule", schedule]
        if o.timeout != d.timeout:
            args += ["--timeout", f"{o.timeout:g}"]
        if o.max_attempts is not None:
            args += ["--max-attempts", str(o.max_attempts)]
        if o.http_fakes:
            args.append("--http-fakes")
        if o.smtp_fake:
            args.append("--smtp-fake")
        for pattern, mode in sorted(o.hooks.items()):
            args += ["--hook", f"{pattern}={mode}"]
        if o.hook_key_header != d.hook_key_header:
            args += ["--hook-key-header", o.hook_key_header]
        for op, fields in sorted(o.identity.items()):
            args += ["--identity", f"{op}={','.join(fields)}"]
        if o.between:
            args += ["--between", shlex.join(o.between)]
        if o.signal != d.signal:
            args += ["--signal", o.signal, "--grace", f"{o.grace:g}"]
        for name in o.integrations:
            args += ["--integration", name]
        if o.resumers != 1:
            args += ["--resumers", str(o.resumers)]
        if o.barrier:
            args += ["--barrier", o.barrier]
        if o.launcher != d.launcher:
            args += ["--launcher", o.launcher]
        for name in o.preload:
            args += ["--preload", name]
        for name in o.checks:
            args += ["--check", name]
        if o.model_script:
            args += ["--model-script", o.model_script]
        if o.model_variance is not None:
            args += ["--model-variance", str(o.model_variance)]
        for k, v in sorted(o.env.items()):
            args += ["--env", f"{k}={v}"]
        return shlex.join([*args, "--", *self.command])

    def run_case(
        self, schedule: str | Schedule | Sequence[str], *, seed: int | None = None, check: bool = True
    ) -> CaseResult:
        """Run one case.  ``check=False`` skips the catalogue check (random chaos schedules)."""
        sched = parse_schedule(schedule)
        discovery = self.discover()
        if check:
            self.check_schedule(sched)
        sched = resolve_schedule(sched, discovery)  # percentage kills -> this discovery's ms
        text = str(sched)
        clean = discovery.run_for(_first_label(sched))
        if clean is not None:  # the work depends on the thread: run under a clean run's thread
            thread, baseline = clean.thread, clean.baseline
            baseline_note = (
                f"{PER_THREAD_BASELINE}: judged against the clean run of its own thread {thread}"
                f" ({discovery.mode_reason})"
            )
        else:
            thread, baseline = f"kd-{uuid.uuid4().hex[:12]}", discovery.baseline
            baseline_note = f"{SHARED_BASELINE}: judged against the first clean run ({discovery.mode_reason})"
        workdir = self._new_workdir(text)
        reproduce = self.reproduce_line(text)
        mark = uuid.uuid4().hex
        self._mark_ledger(workdir, thread, mark)
        max_attempts = self.options.max_attempts or len(sched) + 3
        plan = {
            "command": list(self.command),
            "schedule": text,
            "seed": seed,
            "thread": thread,
            "workdir": str(workdir),
            "options": {k: v for k, v in asdict(self.options).items() if k != "root"},
            "reproduce": reproduce,
        }
        (workdir / STATE_DIR / "plan.json").write_text(json.dumps(plan, indent=2, default=str))

        attempts: list[Attempt] = []
        violations: list[Violation] = []
        notes: list[str] = []
        completed = False
        number = 0
        resumers_used = False
        seen: LedgerSnapshot | None = None
        while number < max_attempts:
            number += 1
            if number > 1 and self.options.between:
                between = self._between(workdir, thread, number)
                if between is not None:
                    violations.append(between)
                    break
            kill = sched.for_attempt(number)
            if number == 2 and self.options.resumers > 1 and not resumers_used:
                resumers_used = True
                batch = self._concurrent(workdir, thread, number, kill)
            else:
                batch = self._launch(workdir, thread, [self._spec(workdir, thread, number, kill)])
            attempts.extend(batch)
            seen, broken = self._check_ledger(workdir, thread, mark, seen, number)
            if broken is not None:
                violations.append(broken)
                break
            stop = False
            for a in batch:
                v = self._attempt_violation(a, text)
                if v is not None:
                    violations.append(v)
                    stop = True
            if stop:
                break
            if all(a.outcome == EXITED and a.returncode == 0 for a in batch) and number >= len(sched):
                completed = True
                break
        if not completed and not violations:
            last = attempts[-1]
            violations.append(
                Violation(
                    RESUME_FAILED,
                    f"the run never completed: {len(attempts)} attempt(s), the last "
                    f"{'exited ' + str(last.returncode) if last.outcome == EXITED else last.outcome}"
                    + (
                        f"; its stderr ends with: {_last_line(last.stderr_tail)}"
                        if last.stderr_tail.strip()
                        else ""
                    ),
                    detail={"attempts": len(attempts), "last_returncode": last.returncode},
                )
            )

        ledger: LedgerSnapshot | None = None
        summary: dict[str, dict[str, int]] = {}
        model: dict[str, Any] = {}
        try:
            ledger = self._snapshot(workdir, thread)
        except Exception as exc:  # a broken ledger is the harness's problem, said in one line
            violations.append(Violation(HARNESS_ERROR, f"cannot read the ledger: {exc}"))
        if ledger is not None and not any(v.kind == HARNESS_ERROR for v in violations):
            judged = self._judge(baseline, ledger, attempts, violations, completed)
            if clean is None and _workload_shaped([*violations, *judged], sched):
                # A missing or unexpected effect may be this thread's own work: a clean run of
                # the case's thread says whether the shared baseline was the wrong yardstick.
                own = self._own_thread_baseline(thread, baseline, sched)
                if own is not None:
                    baseline, why = own
                    baseline_note = f"{PER_THREAD_BASELINE}: judged against a clean run of its own thread"
                    baseline_note += f" ({why})"
                    violations = [
                        v
                        for v in violations
                        if not (v.kind == POINT_NOT_REACHED and v.detail.get("attempt") == 1)
                    ]
                    if len(attempts) == 1 and attempts[0].outcome == NOT_REACHED:
                        notes.append(
                            f"not applicable: this thread's clean run never reaches {sched.kills[0]}"
                        )
                    judged = self._judge(baseline, ledger, attempts, violations, True)
            violations.extend(judged)
            from killdrill.verdict import summarize

            summary = summarize(baseline, ledger, identity=self.options.identity, volatile=discovery.volatile)
            from killdrill.model_work import model_work

            model = model_work(baseline, ledger)
        catalogue = clean.catalogue if clean is not None else discovery.catalogue
        notes.extend(self._resume_notes(catalogue, attempts, ledger))
        result = CaseResult(
            command=self.command,
            schedule=text,
            thread=thread,
            workdir=str(workdir),
            attempts=tuple(attempts),
            violations=tuple(violations),
            notes=tuple(notes),
            reproduce=reproduce,
            summary=summary,
            ledger=ledger,
            seed=seed,
            model=model,
            baseline=baseline_note,
        )
        (workdir / STATE_DIR / "result.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
        if result.ok and not self.options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        return result

    def _judge(
        self,
        baseline: LedgerSnapshot,
        ledger: LedgerSnapshot,
        attempts: Sequence[Attempt],
        violations: Sequence[Violation],
        completed: bool,
    ) -> list[Violation]:
        """The effect verdict, unless the case never got going (a hang, a kill that missed)."""
        from killdrill.verdict import judge

        if not completed and any(v.kind in (HANG, POINT_NOT_REACHED) for v in violations):
            return []
        return judge(
            baseline,
            ledger,
            attempts,
            identity=self.options.identity,
            volatile=self.discover().volatile,
            checks=self.options.checks,
        )

    def _own_thread_baseline(
        self, thread: str, baseline: LedgerSnapshot, sched: Schedule
    ) -> tuple[LedgerSnapshot, str] | None:
        """A clean run under ``thread`` (own workdir and ledger), if it did other work than the
        shared baseline; None when it did the same (the violations stand) or could not run."""
        from killdrill.baselines import workload_difference

        try:
            attempt, snap = self._clean_run(thread, f"own-thread-{_slug(str(sched))}", private=True)
        except HarnessError:
            return None
        discovery = self.discover()
        differ = workload_difference(discovery.labels(), baseline, [e.label for e in attempt.trace], snap)
        if not differ:
            return None
        return snap, f"the shared baseline's thread did other work: {differ}; one extra clean run"

    def _check_ledger(
        self, workdir: Path, thread: str, mark: str, seen: LedgerSnapshot | None, number: int
    ) -> tuple[LedgerSnapshot | None, Violation | None]:
        """After each attempt: the ledger still holds every call recorded before, and the marker."""
        from killdrill.baselines import ledger_break

        try:
            now = self._snapshot(workdir, thread)
            marked = self._ledger_marked(workdir, thread, mark)
        except Exception as exc:
            return seen, Violation(HARNESS_ERROR, f"cannot read the ledger after attempt {number}: {exc}")
        why = ledger_break(seen, now, marked)
        if why:
            return now, Violation(
                HARNESS_ERROR,
                f"the ledger changed under the case during attempt {number}: {why}; the calls it"
                " lost cannot be counted, so no verdict can be trusted (does the agent delete files"
                " in its workdir?)",
                detail={"attempt": number, "why": why},
            )
        return now, None

    def baseline_for(self, schedule: str | Schedule) -> LedgerSnapshot:
        """The clean ledger a case of ``schedule`` is judged against (per-thread mode aware)."""
        discovery = self.discover()
        clean = discovery.run_for(_first_label(parse_schedule(schedule)))
        return clean.baseline if clean is not None else discovery.baseline

    def _attempt_violation(self, a: Attempt, schedule: str) -> Violation | None:
        if a.outcome == NOT_REACHED:
            why = "; ".join(a.notes) or f"the attempt {_how_ended(a)} before reaching it"
            return Violation(
                POINT_NOT_REACHED,
                f"attempt {a.number} was scheduled to be killed at {a.kill} but {why}"
                + (f"; stderr ends with: {_last_line(a.stderr_tail)}" if a.returncode else ""),
                detail={"attempt": a.number, "kill": a.kill, "returncode": a.returncode},
            )
        if a.outcome == TIMED_OUT:
            where = a.trace[-1].label if a.trace else "before its first boundary"
            return Violation(
                HANG,
                f"attempt {a.number} hung: no exit within {self.options.timeout:g}s "
                f"(last boundary: {where}); its process tree was killed",
                detail={"attempt": a.number, "last_boundary": where},
            )
        if a.outcome == HARNESS_FAILED:
            return Violation(
                HARNESS_ERROR,
                f"attempt {a.number}: {'; '.join(a.notes) or 'harness failure'}",
                detail={"attempt": a.number},
            )
        return None

    def _between(self, workdir: Path, thread: str, number: int) -> Violation | None:
        import subprocess

        argv = _fill(_resolve(self.options.between or ()), thread, str(workdir))
        env = self._env(workdir, thread)
        env["KILLDRILL_ATTEMPT"] = str(number)
        try:
            proc = subprocess.run(
                argv,
                env=env,
                cwd=self.options.cwd,
                capture_output=True,
                timeout=self.options.timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return Violation(HANG, f"the between-attempts command hung for {self.options.timeout:g}s")
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace")
            return Violation(
                RESUME_FAILED,
                f"the between-attempts command {shlex.join(argv)} exited {proc.returncode}: "
                f"{_last_line(err)}",
            )
        return None

    def _concurrent(self, workdir: Path, thread: str, number: int, kill: Kill | None) -> list[Attempt]:
        from killdrill.concurrency import Barrier

        specs = [
            self._spec(workdir, thread, number, kill if i == 0 else None, suffix=f".{i + 1}")
            for i in range(self.options.resumers)
        ]
        return self._launch(workdir, thread, specs, hook=Barrier(self.options.barrier))

    @staticmethod
    def _resume_notes(
        catalogue: Sequence[CatalogueEntry], attempts: Sequence[Attempt], ledger: LedgerSnapshot | None
    ) -> list[str]:
        """Flag a resume that restarted from scratch and re-did work a checkpoint held.

        Agents legitimately re-enter at their first boundary (a functional API entrypoint, a
        tool loop's first node) and skip what is done, so re-entry alone says nothing.  The
        note needs repeated work: a step committed more often over the case's attempts than
        in a clean run.  A step counts as committed at its ``committed:`` point, or, for agents
        that emit none, when the next step began (``before:`` after an ``after:``): a kill at
        ``after:X`` alone is before X's checkpoint, and re-running X is then correct.
        """
        from collections import Counter

        from killdrill.baselines import repeated_calls

        clean = Counter(_committed_steps(e.point for e in catalogue))
        done: Counter[str] = Counter()
        if attempts:
            done.update(_committed_steps(e.point for e in attempts[0].trace))
        notes = []
        first = _first_step(e.label for e in catalogue)
        for prev, nxt in itertools.pairwise(attempts):
            done.update(_committed_steps(e.point for e in nxt.trace))
            redone = sorted(step for step in done if done[step] > clean[step])
            if not (
                prev.outcome == KILLED
                and redone
                and first
                and _first_step(e.label for e in nxt.trace) == first
            ):
                continue
            again = repeated_calls(ledger, nxt.number) if ledger is not None else []
            calls = (
                f", repeating {len(again)} earlier call(s)"
                f" ({', '.join(dict.fromkeys(f'{c.provider}.{c.op}' for c in again))})"
                if again
                else ""
            )
            notes.append(
                f"resumed_from_start: attempt {nxt.number} re-entered at {first} after attempt "
                f"{prev.number} was killed at {prev.killed_at}, and re-did committed steps"
                f" ({', '.join(redone[:3])}: more often than in a clean run){calls}: is the input"
                " re-submitted instead of resuming from the checkpoint?"
            )
            break  # one note says it; later attempts repeat the same story
        return notes

    def run_all(
        self,
        schedules: Iterable[str] | None = None,
        *,
        on_case: Callable[[CaseResult], None] | None = None,
    ) -> DrillResult:
        """One case per catalogue point (or per schedule given); ``workers`` cases at once."""
        discovery = self.discover()
        todo = list(schedules) if schedules is not None else discovery.labels()
        for s in todo:
            self.check_schedule(parse_schedule(s))
        results: list[CaseResult | None] = [None] * len(todo)

        def one(i: int) -> None:
            results[i] = self.run_case(todo[i], check=False)
            if on_case is not None:
                on_case(results[i])  # type: ignore[arg-type]

        if self.options.workers > 1:
            pool = ThreadPoolExecutor(self.options.workers)
            try:
                for f in [pool.submit(one, i) for i in range(len(todo))]:
                    f.result()
            except BaseException:
                # Ctrl-C, SIGTERM or a failed case: queued cases never start, running attempts die now.
                from killdrill.supervisor import clear_interrupt, interrupt_all

                pool.shutdown(wait=False, cancel_futures=True)
                interrupt_all()
                pool.shutdown(wait=True)
                clear_interrupt()
                raise
            pool.shutdown()
        else:
            for i in range(len(todo)):
                one(i)
        return DrillResult(discovery=discovery, cases=tuple(r for r in results if r is not None))


def _model_env(url: str) -> dict[str, str]:
    """Point the OpenAI and Anthropic SDKs (and what is built on them) at the model fake.

    The keys are dummies on purpose: a drill must never reach, or bill, a real model.
    """
    return {
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_KEY": "sk-killdrill-fake",
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-killdrill-fake",
    }


_HARNESS_VAR = re.compile(r"\{(KILLDRILL_[A-Z0-9_]+)\}")


def _expand_env(env: Mapping[str, str], user: Mapping[str, str]) -> dict[str, str]:
    """``--env`` values may name the harness's variables: ``STRIPE_API_BASE={KILLDRILL_FAKES_URL}``
    is filled per attempt (the fakes' port changes), so an app reads its usual variable."""
    out = dict(env)
    for name in user:
        value = out.get(name)
        if value is None or "{KILLDRILL_" not in value:
            continue

        def fill(m: re.Match[str], name: str = name) -> str:
            if m.group(1) not in out:
                raise HarnessError(
                    f"--env {name}: {{{m.group(1)}}} is not set for the agent"
                    + (
                        " (the HTTP fakes are off: add --http-fakes)"
                        if m.group(1) == "KILLDRILL_FAKES_URL"
                        else ""
                    )
                )
            return out[m.group(1)]

        out[name] = _HARNESS_VAR.sub(fill, value)
    return out


def _replace_all(value: Any, subs: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in subs.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {_replace_all(k, subs): _replace_all(v, subs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_replace_all(v, subs) for v in value)
    return value


def _normalize(snap: LedgerSnapshot, subs: Mapping[str, str]) -> LedgerSnapshot:
    calls = tuple(
        replace(c, key=_replace_all(c.key, subs), payload=_replace_all(c.payload, subs)) for c in snap.calls
    )
    in_flight = tuple(replace(f, key=_replace_all(f.key, subs)) for f in snap.in_flight)
    return LedgerSnapshot(calls=calls, state=_replace_all(snap.state, subs), in_flight=in_flight)


def _first_label(sched: Schedule) -> str | None:
    """The label of the schedule's first kill when it names a point (``before:x#2``), else None."""
    if not sched.kills or sched.kills[0].point is None:
        return None
    first = sched.kills[0]
    return occurrence_label(first.point, first.occurrence)  # type: ignore[arg-type]


def _workload_shaped(violations: Sequence[Violation], sched: Schedule) -> bool:
    """Violations another thread's work could explain: an effect missing or unasked, or a first
    kill at a named point that never landed (a random offset that missed says nothing)."""
    named = _first_label(sched) is not None
    return any(
        v.kind in (MISSING_EFFECT, UNEXPECTED_EFFECT)
        or (named and v.kind == POINT_NOT_REACHED and v.detail.get("attempt") == 1)
        for v in violations
    )


def _first_step(labels: Iterable[str]) -> str | None:
    """The first ``before:`` of a step (checkpointer points such as ``before:checkpoint`` aside)."""
    return next(
        (lb for lb in labels if lb.startswith("before:") and lb.split("#")[0] != "before:checkpoint"), None
    )


def _committed_steps(points: Iterable[str]) -> list[str]:
    """The steps one attempt (or a clean run) committed, in order: ``committed:X`` points, or for
    agents that emit none, an ``after:X`` followed by the next step's ``before:``."""
    points = [p for p in points if p.split(":", 1)[1] != "checkpoint"]  # the checkpointer's own
    if any(p.startswith("committed:") for p in points):
        return [p.split(":", 1)[1] for p in points if p.startswith("committed:")]
    out: list[str] = []
    pending: str | None = None
    for p in points:
        kind, name = p.split(":", 1)
        if kind == "after":
            pending = name
        elif kind == "before" and pending is not None:
            out.append(pending)
            pending = None
    return out


def _how_ended(a: Attempt) -> str:
    if a.returncode is None:
        return "ended"
    if a.returncode < 0:
        return f"died of signal {-a.returncode}"
    return f"exited {a.returncode}"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def run(command: Sequence[str], schedule: str | Schedule | Sequence[str], **options: Any) -> CaseResult:
    """Discover ``command`` and run one case: ``killdrill.run(cmd, "during:payments.charge")``."""
    return Drill(command, **options).run_case(schedule)


def discover(command: Sequence[str], **options: Any) -> Discovery:
    """The kill-point catalogue and baseline ledger of a clean run of ``command``."""
    return Drill(command, **options).discover()


def _rmdir_if_empty(path: Path) -> None:
    """Remove ``path`` if it is an empty directory (kept workdirs keep it)."""
    try:
        path.rmdir()
    except OSError:
        pass
