"""One case: a fresh workdir, attempt 1 armed with the schedule's first kill, attempts 2..k
resumed under the same thread and workdir, then the verdict and the case's files."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from killdrill import envvars
from killdrill.drill.base import DrillSetup
from killdrill.drill.case_verdict import CaseJudge, first_label, workload_shaped
from killdrill.drill.db_effects import with_rows
from killdrill.drill.deployment import Deployed
from killdrill.drill.discovery import Discoverer
from killdrill.drill.env import fill, last_line, resolve_command
from killdrill.drill.intervals import resolve_schedule
from killdrill.drill.phases import PhaseClock, clean_attempt, clip_waits
from killdrill.drill.thread_view import with_thread_view
from killdrill.drill.topology import DRIVER
from killdrill.drill.workdirs import RunContext
from killdrill.errors import HarnessError
from killdrill.faults import fleet, kinds, powerloss
from killdrill.faults.kinds import Batch, Scene
from killdrill.ledger import LedgerError
from killdrill.points import Schedule, parse_schedule
from killdrill.records import (
    EXITED,
    HANG,
    HARNESS_ERROR,
    PER_THREAD_BASELINE,
    POINT_NOT_REACHED,
    RESUME_FAILED,
    SHARED_BASELINE,
    Attempt,
    AttemptOutcome,
    Call,
    CaseResult,
    CleanRun,
    Discovery,
    LedgerSnapshot,
    Violation,
)
from killdrill.report.jsonfile import dumps as json_text
from killdrill.verdict import summarize
from killdrill.verdict.baselines import found_done, ledger_break
from killdrill.verdict.consequences import regroup_summary
from killdrill.verdict.diagnosis import diagnose
from killdrill.verdict.model_work import model_work, unscripted_line


@dataclass(frozen=True)
class Yardstick:
    """The clean ledger a case is judged against, and why that one (shared, or its thread's own)."""

    baseline: LedgerSnapshot
    note: str


class CasePlan(Protocol):
    """What each step of a case's launch loop starts (``faults.plan.Plan``; a deployment's case,
    ``drill.deployment.DeploymentCase``, whose one step is the whole case: ``whole`` reads it)."""

    scene: Scene

    def step(self, number: int) -> Batch: ...

    def whole(self, attempts: Sequence[Attempt]) -> Deployed | None: ...


@dataclass
class CaseAttempts:
    """What the attempts of one case left: every attempt, the verdicts they earned on the way
    (a kill that missed, a hang, a ledger changed under the case) and whether the run completed."""

    attempts: list[Attempt] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    completed: bool = False
    # the ledger as read after the last attempt, when nothing ran after that read: the case's
    # verdict judges it (a 1,000-effect case read its ledger three times)
    ledger: LedgerSnapshot | None = None
    started: dict[int, float] = field(default_factory=dict)  # a deployment's: number -> monotonic start


class CaseRunner:
    """Runs one case: its attempts under one thread and workdir, then its verdict and its files."""

    def __init__(
        self,
        setup: DrillSetup,
        discoverer: Discoverer,
        judge: CaseJudge,
        reproduce_line: Callable[[str], str],
    ) -> None:
        self.setup = setup
        self.discoverer = discoverer
        self.judge = judge
        self.options = setup.options
        self.workdirs = setup.workdirs
        self.reproduce_line = reproduce_line

    def run_case(
        self,
        schedule: str | Schedule | Sequence[str],
        *,
        seed: int | None = None,
        check: bool = True,
        offsets_may_miss: bool = False,
    ) -> CaseResult:
        """Run one case.  ``check=False`` skips the catalogue check (random chaos schedules).

        ``offsets_may_miss`` (chaos): a kill at a random offset that the run ended before is a
        miss, not ``point_not_reached`` (a named point that is never reached still is)."""
        clock = PhaseClock()
        sched = parse_schedule(schedule)
        fleet.check_schedule(sched)
        powerloss.check_schedule(sched)
        kinds.check_schedule(sched, self.options)  # a target naming nothing: before any run
        discovery = self.discoverer.discover()
        clock.mark("discovery")  # when this case is the first to need it (shared by all)
        if check:
            self.discoverer.check_schedule(sched)
        sched = resolve_schedule(sched, discovery)  # percentage kills -> this discovery's ms
        text = str(sched)
        clean = discovery.run_for(first_label(sched))
        thread, yard = thread_and_yardstick(discovery, clean)
        run = RunContext(self.workdirs.new(text), thread)
        reproduce = self.reproduce_line(text)
        self._write_plan(run, text, seed, reproduce)
        clock.mark("setup")
        waits: list[dict[str, Any]] = []
        rows: list[Call] = []
        try:
            ran = self._attempts(run, sched, offsets_may_miss, clock)
            rows = self._rows(run, ran)  # before the release drops the run's schema
            clock.mark("verdict")
            if clock.kills and len(ran.attempts) > 1:  # what the runtime held after a kill
                fresh = clean_attempt(discovery)
                waits = clip_waits(
                    self.setup.runtime_waits(run, clock.timeline, fresh), clock.kills, time.time()
                )
                clock.mark("verdict")
        finally:
            self.setup.release(run)
            clock.mark("release")

        violations, notes = ran.violations, ran.notes
        ledger: LedgerSnapshot | None = None
        summary: dict[str, dict[str, int]] = {}
        model: dict[str, Any] = {}
        try:
            ledger = with_rows(ran.ledger if ran.ledger is not None else self.workdirs.snapshot(run), rows)
        except (LedgerError, OSError, ValueError) as exc:  # unreadable or corrupt (JSON) ledger: one line
            violations.append(Violation(HARNESS_ERROR, f"cannot read the ledger: {exc}"))
        if ledger is not None and not any(v.kind == HARNESS_ERROR for v in violations):
            judged = self.judge.effects(yard.baseline, ledger, ran.attempts, violations, ran.completed)
            if clean is None and workload_shaped([*violations, *judged], sched):
                own = self._on_own_thread(run, sched, ran, ledger, yard, violations)
                clock.mark("verdict")
                if own is not None:
                    yard, violations, judged = own
                clock.mark("clean runs")
            violations.extend(judged)
            summary = summarize(yard.baseline, ledger, self.judge.naming())
            model = model_work(yard.baseline, ledger)
        # cause, fix, consequences
        violations = diagnose(
            violations,
            baseline=yard.baseline,
            attempts=ran.attempts,
            integrations=self.options.integrations,
            ledger=ledger,
        )
        summary = regroup_summary(summary, violations)
        catalogue = clean.catalogue if clean is not None else discovery.catalogue
        notes.extend(self.judge.resume_notes(catalogue, ran.attempts, ledger))
        notes.extend(filter(None, [unscripted_line(ledger)]))
        notes.extend(fleet.upgrade_notes(self.setup.command, self.options.resume_with, ran.attempts))
        result = CaseResult(
            command=self.setup.command,
            schedule=text,
            thread=thread,
            workdir=str(run.workdir),
            attempts=tuple(ran.attempts),
            violations=tuple(violations),
            notes=tuple(notes),
            reproduce=reproduce,
            summary=summary,
            ledger=ledger,
            seed=seed,
            model=model,
            baseline=yard.note,
            waits=tuple(waits),
        )
        clock.mark("verdict")
        if result.ok and not self.options.keep:  # its result.json would be removed with it
            self.workdirs.discard(run.workdir)
            return replace(result, phases=clock.result())
        result = replace(result, phases=clock.result())
        (run.state / "result.json").write_text(json_text(result.to_dict()))
        return result

    def _on_own_thread(
        self,
        run: RunContext,
        sched: Schedule,
        ran: CaseAttempts,
        ledger: LedgerSnapshot,
        yard: Yardstick,
        violations: list[Violation],
    ) -> tuple[Yardstick, list[Violation], list[Violation]] | None:
        """A missing or unexpected effect may be this thread's own work: a clean run of the case's
        thread says whether the shared baseline was the wrong yardstick.  Then the yardstick, the
        attempts' violations and the effects judged again; None when the first verdict stands (a
        clean run that found the case's run finished, as state kept by thread outside the workdir
        makes it, is no yardstick: a note says so)."""
        own = self.judge.own_thread_baseline(run.thread, yard.baseline, sched)
        if own is None:
            return None
        baseline, why, other_work = own
        done = found_done(yard.baseline, ledger, baseline)
        if done:  # it attached to the case's finished run: every effect would read as unexpected
            ran.notes.append(f"shared baseline kept: {done}")
            return None
        yard = Yardstick(
            baseline, f"{PER_THREAD_BASELINE}: judged against a clean run of its own thread ({why})"
        )
        if other_work:  # a point this thread's own clean run never reaches is not a miss
            violations = [
                v for v in violations if not (v.kind == POINT_NOT_REACHED and v.detail.get("attempt") == 1)
            ]
            if len(ran.attempts) == 1 and ran.attempts[0].outcome == AttemptOutcome.POINT_NOT_REACHED:
                ran.notes.append(f"not applicable: this thread's clean run never reaches {sched.faults[0]}")
        return yard, violations, self.judge.effects(baseline, ledger, ran.attempts, violations, True)

    def _rows(self, run: RunContext, ran: CaseAttempts) -> list[Call]:
        """The run's effect rows (``--effect-table``); unreadable: a harness error of the case."""
        try:
            return self.setup.effect_rows.read(run)
        except HarnessError as exc:
            ran.violations.append(Violation(HARNESS_ERROR, str(exc)))
            return []

    def _write_plan(self, run: RunContext, schedule: str, seed: int | None, reproduce: str) -> None:
        """``plan.json``: what this case is, written before attempt 1 (a killed harness leaves it)."""
        plan = {
            "command": list(self.setup.command),
            "schedule": schedule,
            "seed": seed,
            "thread": run.thread,
            "workdir": str(run.workdir),
            "options": {k: v for k, v in asdict(self.options).items() if k not in ("root", "spelled")},
            "reproduce": reproduce,
        }
        (run.state / "plan.json").write_text(json.dumps(plan, indent=2, default=str))

    def _attempts(
        self, run: RunContext, sched: Schedule, offsets_may_miss: bool, clock: PhaseClock
    ) -> CaseAttempts:
        """The case's launches inside what its faults' kinds do over the whole case (the power
        loss's lossy workdir: ``faults.kinds.lives``, in the case's scene for its nemeses), undone
        however the case ends."""
        scene = self.setup.scene(run)
        lives = kinds.lives(sched, scene)
        try:
            for life in lives:
                life.open()
            return self._launches(run, sched, offsets_may_miss, clock, scene)
        finally:
            for life in reversed(lives):
                life.close()

    def _launches(
        self,
        run: RunContext,
        sched: Schedule,
        offsets_may_miss: bool,
        clock: PhaseClock,
        scene: Scene,
    ) -> CaseAttempts:
        """Attempt 1 armed with the first kill, then resumes under the same thread until the run
        completes, a verdict is already certain, or ``max_attempts`` ran out."""
        mark = uuid.uuid4().hex
        self.workdirs.mark(run, mark)
        max_attempts = self.options.max_attempts or len(sched) + 3
        plan: CasePlan = self.setup.plan(run, sched, max_attempts, scene)
        lives = list(scene.lives.values())
        out = CaseAttempts()
        number = 0
        seen: LedgerSnapshot | None = None
        while number < max_attempts:
            number += 1
            out.ledger = None  # the between-attempts command may write to it
            if number > 1 and self.options.between:
                between = self._between(run, number)
                if between is not None:
                    out.violations.append(between)
                    break
            clock.mark("restart" if number > 1 else "setup")
            step = plan.step(number)  # one launch, a zombie and its resumer, N resumers, a deployment
            batch = self.setup.launch(run, step.specs, step.faults, plan.scene)
            out.notes.extend(note for fault in step.faults for note in fault.notes())  # what they did
            for life in lives:  # every launch of the step reaped: a power loss happens now
                batch = life.attempts(batch)
            whole = plan.whole(batch)
            if whole is not None:  # the step was the whole case: a deployment's services and driver
                deployed = self._deployed(run, whole, mark, offsets_may_miss, out.notes)
                clock.mark("deployment")
                clock.deployed(deployed.attempts, deployed.started)  # what the runtime held, read after
                return deployed
            number += min(step.numbers, len(batch)) - 1  # a resumer never started used no number
            clock.launched(batch)
            batch = with_thread_view(run.workdir, batch)  # exited 0 with work pending: unfinished_resume
            out.attempts.extend(batch)
            self.setup.effect_rows.observe(run, number)  # the rows this attempt wrote
            now, broken = self._check_ledger(run, mark, seen, number)
            seen = now if now is not None else seen
            out.ledger = now
            if broken is not None:
                out.violations.append(broken)
                break
            ended, missed = [], False
            for a in batch:
                v = self.judge.attempt_violation(a)
                if v is not None and v.kind == HANG:  # the runtime's side (its service's explain_hang)
                    v = with_held(v, self.setup.explain_hang(run))
                if v is not None and offsets_may_miss and v.kind == POINT_NOT_REACHED:
                    v, note = offset_missed(a, sched, v)
                    if note:
                        out.notes.append(note)
                        missed = True
                if v is not None:
                    ended.append(v)
            if ended:
                out.violations.extend(ended)
                break
            if missed or (
                all(a.outcome == EXITED and a.returncode == 0 for a in batch) and number >= len(sched)
            ):
                out.completed = True
                break
        if not out.completed and not out.violations:
            out.violations.append(never_completed(out.attempts, max_attempts))
        return out

    def _deployed(
        self, run: RunContext, deployed: Deployed, mark: str, offsets_may_miss: bool, notes: list[str]
    ) -> CaseAttempts:
        """What a deployment's case left (services and driver under one supervisor,
        killdrill.drill.deployment), judged.  ``offsets_may_miss`` (chaos): a timed kill the driver
        finished before is a miss, a note."""
        out = CaseAttempts(attempts=deployed.attempts, violations=list(deployed.violations), notes=notes)
        out.started = deployed.started
        out.ledger, broken = self._check_ledger(run, mark, None, len(out.attempts))
        if broken is not None:
            out.violations.append(broken)
            return out
        for a in out.attempts:
            v = self.judge.attempt_violation(a)
            if v is not None:
                out.violations.append(with_held(v, self.setup.explain_hang(run)) if v.kind == HANG else v)
        missed = deployed.unreached
        if missed is not None and offsets_may_miss and not missed.is_named and deployed.completed:
            out.notes.append(f"kill missed: the driver was done before {missed} could land")
        elif missed is not None and not out.violations:
            out.violations.append(
                Violation(
                    POINT_NOT_REACHED,
                    f"the kill {missed} was never reached: no process of the deployment got"
                    " there before the driver was done",
                    detail={"kill": str(missed)},
                )
            )
        out.completed = deployed.completed
        drivers = [a for a in out.attempts if a.process == DRIVER]
        if not out.completed and not out.violations and drivers:
            out.violations.append(never_completed(drivers))
        return out

    def _check_ledger(
        self, run: RunContext, mark: str, seen: LedgerSnapshot | None, number: int
    ) -> tuple[LedgerSnapshot | None, Violation | None]:
        """After each attempt: the ledger still holds every call recorded before, and the marker.
        Returns the ledger as read (None when it could not be read) and what broke."""
        try:
            now, marked = self.workdirs.snapshot_and_mark(run, mark, seen)
        except (LedgerError, OSError, ValueError) as exc:  # a bug in killdrill is not a verdict: it raises
            return None, Violation(HARNESS_ERROR, f"cannot read the ledger after attempt {number}: {exc}")
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

    def _between(self, run: RunContext, number: int) -> Violation | None:
        """The between-attempts command (reconciliation), run before attempt ``number``."""
        argv = fill(resolve_command(self.options.between or ()), run.thread, str(run.workdir))
        env = self.setup.env(run)
        env[envvars.ATTEMPT] = str(number)
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
                f"the between-attempts command {shlex.join(argv)} exited {proc.returncode}: {last_line(err)}",
            )
        return None


def with_held(v: Violation, held: tuple[str, dict[str, Any]] | None) -> Violation:
    """A ``hang`` with what the runtime still holds for the case said in it (message and detail)."""
    if held is None:
        return v
    return replace(v, message=f"{v.message}; {held[0]}", detail={**v.detail, "runtime": held[1]})


def never_completed(attempts: Sequence[Attempt], max_attempts: int | None = None) -> Violation:
    """The run did not complete within its attempts, and nothing else was said about it.  When
    the last attempt was killed and the attempt limit left no room for a resume, the drill stopped
    the run, not the agent (``detail["attempt_limit"]``)."""
    last = attempts[-1]
    detail: dict[str, Any] = {"attempts": len(attempts), "last_returncode": last.returncode}
    if last.killed_at is not None and max_attempts is not None and len(attempts) >= max_attempts:
        detail["attempt_limit"] = max_attempts
        return Violation(
            RESUME_FAILED,
            f"the run never completed: the drill stopped after its attempt limit ({max_attempts}"
            f" attempt(s), max_attempts) with attempt {last.number} killed at {last.killed_at};"
            " no resume ran",
            detail=detail,
        )
    return Violation(
        RESUME_FAILED,
        f"the run never completed: {len(attempts)} attempt(s), the last "
        f"{'exited ' + str(last.returncode) if last.outcome == EXITED else last.outcome}"
        + (f"; its stderr ends with: {last_line(last.stderr_tail)}" if last.stderr_tail.strip() else ""),
        detail=detail,
    )


def offset_missed(a: Attempt, sched: Schedule, unreached: Violation) -> tuple[Violation | None, str | None]:
    """Chaos's reading of a kill that never landed: a named point stays ``point_not_reached``; a
    random offset the run ended before is a miss (a note: the run went to its end), and one
    the attempt never got to because it crashed on its own is ``resume_failed``."""
    kill = sched.for_attempt(a.number)
    if kill is not None and kill.is_named:
        return unreached, None
    if a.returncode == 0:
        return None, f"kill missed: attempt {a.number} exited 0 before {a.kill} could land"
    return (
        Violation(
            RESUME_FAILED,
            f"attempt {a.number} exited {a.returncode} on its own before its kill {a.kill} landed",
            detail={"attempt": a.number, "returncode": a.returncode},
        ),
        None,
    )


def thread_and_yardstick(discovery: Discovery, clean: CleanRun | None) -> tuple[str, Yardstick]:
    """The case's thread and baseline: a clean run's own when the work depends on the thread,
    else a new thread judged against the first clean run."""
    if clean is not None:
        return clean.thread, Yardstick(
            clean.baseline,
            f"{PER_THREAD_BASELINE}: judged against the clean run of its own thread {clean.thread}"
            f" ({discovery.mode_reason})",
        )
    return f"kd-{uuid.uuid4().hex[:12]}", Yardstick(
        discovery.baseline, f"{SHARED_BASELINE}: judged against the first clean run ({discovery.mode_reason})"
    )
