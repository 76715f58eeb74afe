"""One case: a fresh workdir, attempt 1 armed with the schedule's first kill, attempts 2..k
resumed under the same thread and workdir, then the verdict and the case's files."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from killdrill.drill.case_verdict import Judging, first_label, workload_shaped
from killdrill.drill.env import fill, last_line, resolve_command
from killdrill.drill.errors import STATE_DIR
from killdrill.drill.intervals import resolve_schedule
from killdrill.drill.thread_view import with_thread_view
from killdrill.faults import fleet
from killdrill.faults.resumers import Barrier
from killdrill.ledger import LedgerError
from killdrill.points import Kill, Schedule, parse_schedule
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
    CaseResult,
    LedgerSnapshot,
    Violation,
)
from killdrill.report.jsonfile import dumps as json_text
from killdrill.verdict import summarize
from killdrill.verdict.baselines import ledger_break
from killdrill.verdict.diagnosis import diagnose, regroup_summary
from killdrill.verdict.model_work import model_work


class CaseRunning(Judging):
    """A drill that runs cases."""

    def _paused(
        self, workdir: Path, thread: str, number: int, kill: Kill, next_kill: Kill | None
    ) -> list[Attempt]:
        """Attempt ``number`` paused at ``kill`` (the zombie), attempt ``number + 1`` resuming
        meanwhile; the attempts that ran (the resumer is absent when the point was never reached)."""
        zombie = self._spec(workdir, thread, number, kill)
        resumer = self._spec(workdir, thread, number + 1, next_kill)
        resumer.deferred = True
        return self._launch(workdir, thread, [zombie, resumer], hook=fleet.Pause(kill, resumer))

    def run_case(
        self, schedule: str | Schedule | Sequence[str], *, seed: int | None = None, check: bool = True
    ) -> CaseResult:
        """Run one case.  ``check=False`` skips the catalogue check (random chaos schedules)."""
        sched = parse_schedule(schedule)
        fleet.check_schedule(sched)
        discovery = self.discover()
        if check:
            self.check_schedule(sched)
        sched = resolve_schedule(sched, discovery)  # percentage kills -> this discovery's ms
        text = str(sched)
        clean = discovery.run_for(first_label(sched))
        if clean is not None:  # the work depends on the thread: run under a clean run's thread
            thread, baseline = clean.thread, clean.baseline
            baseline_note = (
                f"{PER_THREAD_BASELINE}: judged against the clean run of its own thread {thread}"
                f" ({discovery.mode_reason})"
            )
        else:
            thread, baseline = f"kd-{uuid.uuid4().hex[:12]}", discovery.baseline
            baseline_note = f"{SHARED_BASELINE}: judged against the first clean run ({discovery.mode_reason})"
        workdir = self.workdirs.new(text)
        reproduce = self.reproduce_line(text)
        mark = uuid.uuid4().hex
        self.workdirs.mark(workdir, thread, mark)
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
            elif kill is not None and kill.pause:  # the zombie: this attempt and its resumer at once
                batch = self._paused(workdir, thread, number, kill, sched.for_attempt(number + 1))
                number += len(batch) - 1
            else:
                batch = self._launch(workdir, thread, [self._spec(workdir, thread, number, kill)])
            batch = with_thread_view(workdir, batch)  # exited 0 with work pending: unfinished_resume
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
                        f"; its stderr ends with: {last_line(last.stderr_tail)}"
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
            ledger = self.workdirs.snapshot(workdir, thread)
        except (LedgerError, OSError, ValueError) as exc:  # unreadable or corrupt (JSON) ledger: one line
            violations.append(Violation(HARNESS_ERROR, f"cannot read the ledger: {exc}"))
        if ledger is not None and not any(v.kind == HARNESS_ERROR for v in violations):
            judged = self._judge(baseline, ledger, attempts, violations, completed)
            if clean is None and workload_shaped([*violations, *judged], sched):
                # A missing or unexpected effect may be this thread's own work: a clean run of
                # the case's thread says whether the shared baseline was the wrong yardstick.
                own = self._own_thread_baseline(thread, baseline, sched)
                if own is not None:
                    baseline, why, other_work = own
                    baseline_note = f"{PER_THREAD_BASELINE}: judged against a clean run of its own thread"
                    baseline_note += f" ({why})"
                    if other_work:  # a point this thread's own clean run never reaches is not a miss
                        violations = [
                            v
                            for v in violations
                            if not (v.kind == POINT_NOT_REACHED and v.detail.get("attempt") == 1)
                        ]
                    if (
                        other_work
                        and len(attempts) == 1
                        and attempts[0].outcome == AttemptOutcome.POINT_NOT_REACHED
                    ):
                        notes.append(
                            f"not applicable: this thread's clean run never reaches {sched.kills[0]}"
                        )
                    judged = self._judge(baseline, ledger, attempts, violations, True)
            violations.extend(judged)
            summary = summarize(baseline, ledger, identity=self.options.identity, volatile=discovery.volatile)
            model = model_work(baseline, ledger)
        violations = diagnose(violations, baseline=baseline, attempts=attempts)  # cause, fix, consequences
        summary = regroup_summary(summary, violations)
        catalogue = clean.catalogue if clean is not None else discovery.catalogue
        notes.extend(self._resume_notes(catalogue, attempts, ledger))
        notes.extend(fleet.upgrade_notes(self.command, self.options.resume_with, attempts))
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
        if result.ok and not self.options.keep:  # its result.json would be removed with it (issue 23)
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            (workdir / STATE_DIR / "result.json").write_text(json_text(result.to_dict()))
        return result

    def _check_ledger(
        self, workdir: Path, thread: str, mark: str, seen: LedgerSnapshot | None, number: int
    ) -> tuple[LedgerSnapshot | None, Violation | None]:
        """After each attempt: the ledger still holds every call recorded before, and the marker."""
        try:
            now, marked = self.workdirs.snapshot_and_mark(workdir, thread, mark)
        except (LedgerError, OSError, ValueError) as exc:  # a bug in killdrill is not a verdict: it raises
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
        clean = discovery.run_for(first_label(parse_schedule(schedule)))
        return clean.baseline if clean is not None else discovery.baseline

    def _between(self, workdir: Path, thread: str, number: int) -> Violation | None:
        argv = fill(resolve_command(self.options.between or ()), thread, str(workdir))
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
                f"the between-attempts command {shlex.join(argv)} exited {proc.returncode}: {last_line(err)}",
            )
        return None

    def _concurrent(self, workdir: Path, thread: str, number: int, kill: Kill | None) -> list[Attempt]:
        specs = [
            self._spec(workdir, thread, number, kill if i == 0 else None, suffix=f".{i + 1}")
            for i in range(self.options.resumers)
        ]
        return self._launch(workdir, thread, specs, hook=Barrier(self.options.barrier))
