"""The verdict as the agent's effects grow: 10^2 .. 10^5 effects, one case each.

    python -m tests.benchmarks.effects [--quick] [--real N ...]

Synthetic ledgers of the payout batch (``tests/agents/basic/payout_batch.py``, not run: a real
10^5-effect run takes minutes of attempts): two clean runs and a case killed in the middle of a
batch (the unfinished batch replayed under its keys); ``_stamped``: a run id in every payload,
different per run (a volatile field, so no two runs' payloads are identical).  Per size:

- ``effects_N_case_s``: one case judged, with the ledgers in memory: :func:`~killdrill.verdict.judge`
  and :func:`~killdrill.verdict.summarize`, the baseline grouped already (once per drill:
  ``_baseline_grouping_s``, which a drill's first case pays).  Goal at 10^5: under 2 s.
  ``_case_cpu_s``: process CPU time of the same (what a loaded machine inflates least),
  ``_us_per_effect`` side by side (flat means linear), ``_harness_mb`` the peak of its
  allocations (``tracemalloc``), ``_report_json_s`` its JSON report with the ledger (``--json``;
  a passing case's workdir, ``result.json`` with it, is removed without writing it);
- ``effects_N_discovery_s``: :func:`~killdrill.verdict.volatile_fields` of the two clean runs
  (once per drill, not per case);
- ``effects_N_ledger_read_s``: the case's ledger written into a real SQLite ledger, then read
  back whole (``Workdirs.snapshot``: snapshot + thread/workdir normalisation);
- ``effects_N_case_read_s``: the read a case makes after its last attempt (only the calls after
  its read of attempt 1, then normalised); ``effects_N_judged_s``: that read plus the case's
  verdict, the harness's whole work on a case after its attempts.  Goal at 10^5: under 2 s.

``--real N``: a real ``killdrill run`` (fork launcher, one kill in the middle) of the payout batch
with N payees, in process: ``real_N_overhead_ratio`` is a case's harness time (its wall time
minus its attempts') over its attempts' time, the median of 5 cases.  Goal at 1,000: at most
0.10.
That leaves out what the harness costs inside the attempts (the agent's messages at its points):
``real_N_supervision_ratio`` is a clean attempt under the supervisor over the same run forked
from the same template without a control channel, minus 1, the median of 5 pairs.  Goal at
1,000: under 0.10 (points the supervisor does not act on go one way: a ~60 us round trip at
every point would be 0.45 of the attempt).
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from killdrill.records import Attempt, Call, CaseResult, LedgerSnapshot
from killdrill.report.jsonfile import dumps as json_text
from killdrill.verdict import EffectNaming, judge, summarize, volatile_fields
from killdrill.verdict.index import grouping
from tests.benchmarks.goals import Goal, line

SIZES = (100, 1_000, 10_000, 100_000)
REPO = Path(__file__).resolve().parents[2]


def _run(n: int, thread: str, *, stamp: bool, kill_at: int | None = None) -> list[Call]:
    """The payout batch's calls: one charge per payee; a kill replays its batch of 50.  Keys as
    the drill sees them (the thread normalised to ``{thread}``)."""
    calls: list[Call] = []
    seq = 0

    def charge(i: int, attempt: int, outcome: str) -> None:
        nonlocal seq
        payload: dict[str, Any] = {"account": f"payee-{i:06d}", "amount": 1000 + i % 97}
        if stamp:
            payload["run"] = thread
        calls.append(
            Call(
                seq,
                "payments",
                "charge",
                f"{{thread}}:payee-{i:06d}",
                payload,
                outcome,
                None,
                attempt,
                1,
                0.0,
            )
        )
        seq += 1

    if kill_at is None:
        for i in range(n):
            charge(i, 1, "created")
        return calls
    for i in range(kill_at):
        charge(i, 1, "created")
    for i in range(kill_at - kill_at % 50, n):  # attempt 2 replays the unfinished batch
        charge(i, 2, "replayed" if i < kill_at else "created")
    return calls


def ledgers(n: int, *, stamp: bool) -> tuple[LedgerSnapshot, LedgerSnapshot, LedgerSnapshot]:
    base1 = LedgerSnapshot(calls=tuple(_run(n, "r-base1", stamp=stamp)))
    base2 = LedgerSnapshot(calls=tuple(_run(n, "r-base2", stamp=stamp)))
    case = LedgerSnapshot(calls=tuple(_run(n, "r-case1", stamp=stamp, kill_at=n // 2 + 7)))
    return base1, base2, case


def one_case(
    base: LedgerSnapshot, case: LedgerSnapshot, volatile: dict[str, list[str]], n: int
) -> tuple[float, float]:
    """The harness's verdict on one case after its attempts (checks and summary); returns the
    seconds (wall, CPU) its JSON report (``--json``, ``result.json`` of a kept workdir) then takes."""
    attempts = (Attempt(number=1, kill=None, outcome="killed", returncode=-9, duration_ms=1.0),)
    violations = judge(base, case, attempts, naming=EffectNaming(volatile=volatile))
    assert not violations, violations[:3]
    summary = summarize(base, case, EffectNaming(volatile=volatile))
    assert summary["payments"]["exactly_once"] == n, summary
    t, c = time.perf_counter(), time.process_time()
    result = CaseResult(("agent",), "before:pay_batch", "t", "/w", attempts, summary=summary, ledger=case)
    json_text(result.to_dict())
    return time.perf_counter() - t, time.process_time() - c


def ledger_read(case: LedgerSnapshot, root: Path, *, after_attempt_1: bool = False) -> tuple[float, float]:
    """Seconds (wall, CPU) to read ``case`` back from a real SQLite ledger the way a drill does:
    whole (discovery's clean runs), or ``after_attempt_1``: as a case reads it after its last
    attempt, parsing only what came after its read of attempt 1's calls, then normalised."""
    import sqlite3

    from killdrill.drill.workdirs import RunContext, Workdirs
    from killdrill.ledger import Ledger

    workdir = root / f"read-{len(case.calls)}-{time.monotonic_ns()}"
    (workdir / ".killdrill").mkdir(parents=True)
    path = workdir / ".killdrill" / "ledger.sqlite"
    Ledger(str(path), "t-read").close()  # the schema

    def write(calls: list[Call]) -> None:
        with sqlite3.connect(path) as db:
            db.executemany(
                "INSERT INTO killdrill_calls (thread, seq, provider, op, key, payload, outcome,"
                " effect_id, attempt, pid, time) VALUES ('t-read', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (c.seq + 1, c.provider, c.op, c.key, _canonical(c.payload), c.outcome, c.effect_id, *rest)
                    for c in calls
                    for rest in ((c.attempt, c.pid, c.time),)
                ],
            )
        db.close()

    wd, run = Workdirs(root, None), RunContext(workdir, "t-read")
    first = [c for c in case.calls if c.attempt == 1] if after_attempt_1 else []
    write(first)
    since = wd.snapshot_and_mark(run, "-")[0] if first else None
    write(list(case.calls[len(first) :]))
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    snap = wd.snapshot(run) if since is None else wd.snapshot_and_mark(run, "-", since)[0]
    took, cpu = time.perf_counter() - t, time.process_time() - c
    assert len(snap.calls) == len(case.calls)
    return took, cpu


def _canonical(value: Any) -> str:
    from killdrill.canonical import canonical_json

    return canonical_json(value)


def bench_effects(quick: bool = False, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    out: dict[str, Any] = {"effects_load_average": os.getloadavg()[0]}
    root = Path(tempfile.mkdtemp(prefix="killdrill-bench-effects-"))
    for n in sizes[:3] if quick else sizes:
        for stamp in (False, True):
            tag = f"effects_{n}{'_stamped' if stamp else ''}"
            base1, base2, case = ledgers(n, stamp=stamp)
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            volatile = volatile_fields(base1, base2)
            out[f"{tag}_discovery_s"] = time.perf_counter() - t0
            out[f"{tag}_discovery_cpu_s"] = time.process_time() - c0
            assert volatile == ({"payments.charge": ["run"]} if stamp else {}), volatile
            # the baseline is grouped once per drill (killdrill.verdict.index caches it): its
            # first case pays this, the others do not
            gc.collect()
            t0 = time.perf_counter()
            grouping(base1.calls, EffectNaming(volatile=volatile))
            out[f"{tag}_baseline_grouping_s"] = time.perf_counter() - t0
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            report, report_cpu = one_case(base1, case, volatile, n)
            took, cpu = time.perf_counter() - t0 - report, time.process_time() - c0 - report_cpu
            out[f"{tag}_report_json_s"] = report
            out[f"{tag}_report_json_cpu_s"] = report_cpu
            # a fresh copy of the case ledger: the peak of a case, not of a cached grouping
            case2 = LedgerSnapshot(calls=tuple(case.calls))
            tracemalloc.start()
            one_case(base1, case2, volatile, n)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            out[f"{tag}_case_s"] = took
            out[f"{tag}_case_cpu_s"] = cpu
            out[f"{tag}_us_per_effect"] = 1e6 * took / n
            out[f"{tag}_harness_mb"] = peak / 2**20
            if not stamp:
                read, read_cpu = ledger_read(case, root)
                out[f"effects_{n}_ledger_read_s"], out[f"effects_{n}_ledger_read_cpu_s"] = read, read_cpu
            read, read_cpu = ledger_read(case, root, after_attempt_1=True)
            out[f"{tag}_case_read_s"] = read
            # the harness's whole work on a case after its attempts: its last read and its verdict
            out[f"{tag}_judged_s"] = read + took
            out[f"{tag}_judged_cpu_s"] = read_cpu + cpu
    out["effects_load_average_end"] = os.getloadavg()[0]
    shutil.rmtree(root, ignore_errors=True)
    # the groupings of 10^5-call ledgers cached for the next case: no other row should run
    # beside them (a real drill holds its own baseline's, not another drill's)
    from killdrill.verdict import index

    index._cache.clear()
    gc.collect()
    return out


def bench_real(n: int, cases: int = 5) -> dict[str, Any]:
    """Real cases of the payout batch with ``n`` payees: harness time over attempts' time, the
    median of ``cases`` cases (``_first_``: the drill's first case, which also pays the
    verdict's one-time imports)."""
    from killdrill.drill import Drill, DrillOptions

    root = Path(tempfile.mkdtemp(prefix="killdrill-bench-real-"))
    command = [sys.executable, "tests/agents/basic/payout_batch.py", "--thread", "{thread}"]
    command += ["--ckpt", "{workdir}/ckpt.json", "--n", str(n)]
    drill = Drill(command, DrillOptions(root=root, cwd=str(REPO), launcher="fork"))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    drill.discover()
    disc = time.perf_counter() - t0
    batches = (n + 49) // 50
    runs: list[tuple[float, float]] = []
    for _ in range(cases):
        t0 = time.perf_counter()
        result = drill.run_case(f"before:pay_batch#{batches // 2 + 1}")
        wall = time.perf_counter() - t0
        assert result.ok, result.text()
        runs.append((wall, sum(a.duration_ms for a in result.attempts) / 1000))
    ratios = sorted((wall - att) / att for wall, att in runs)
    supervised, bare = _supervision(drill, cases)
    drill.close()
    shutil.rmtree(root, ignore_errors=True)
    return {
        f"real_{n}_load_average": load,
        f"real_{n}_discovery_s": disc,
        f"real_{n}_case_s": statistics.median(w for w, _ in runs),
        f"real_{n}_attempts_s": statistics.median(a for _, a in runs),
        f"real_{n}_overhead_ratio": statistics.median(ratios),
        f"real_{n}_first_case_overhead_ratio": (runs[0][0] - runs[0][1]) / runs[0][1],
        f"real_{n}_clean_attempt_s": statistics.median(supervised),
        f"real_{n}_unsupervised_run_s": statistics.median(bare),
        f"real_{n}_supervision_ratio": statistics.median(
            s / b - 1 for s, b in zip(supervised, bare, strict=True)
        ),
    }


def _supervision(drill: Any, pairs: int) -> tuple[list[float], list[float]]:
    """The harness's share inside an attempt's time (its points' messages, its supervisor): a
    clean attempt under the supervisor against the same run forked from the same template with
    no control channel (``boundary()`` a no-op; the fakes write the same ledger), in pairs,
    alternating which goes first.  Start to exit of the agent, each."""
    import uuid

    from killdrill.drill.workdirs import RunContext
    from killdrill.process.supervisor import Supervisor

    supervised: list[float] = []
    bare: list[float] = []
    for i in range(pairs):
        for side in ("supervised", "bare") if i % 2 == 0 else ("bare", "supervised"):
            run = RunContext(drill.workdirs.new(side), f"t-{uuid.uuid4().hex[:8]}")
            drill.workdirs.mark(run, uuid.uuid4().hex)
            spec = drill.setup.spec(run, 1, None)
            if side == "supervised":
                attempt = Supervisor().run(spec)
                assert attempt.returncode == 0, attempt.stderr_tail
                supervised.append(attempt.duration_ms / 1000)
                continue
            assert spec.template is not None  # the fork template
            forked = spec.template.spawn(
                spec.argv, env=spec.env, cwd=spec.cwd, stdout=spec.stdout_path, stderr=spec.stderr_path
            )
            t0 = time.perf_counter()
            assert forked.wait() == 0, Path(spec.stderr_path).read_text()[-800:]
            bare.append(time.perf_counter() - t0)
    return supervised, bare


GOALS = {
    "effects_100000_case_s": Goal("<", 2.0),
    "effects_100000_stamped_case_s": Goal("<", 2.0),
    "effects_100000_case_cpu_s": Goal("<", 2.0),
    "effects_100000_judged_s": Goal("<", 2.0),
    "effects_100000_stamped_judged_s": Goal("<", 2.0),
    "effects_100000_stamped_case_cpu_s": Goal("<", 2.0),
    "real_1000_overhead_ratio": Goal("<=", 0.10),
    "real_1000_supervision_ratio": Goal("<", 0.10),
}


def main(argv: list[str]) -> None:
    figures: dict[str, Any] = {}
    if "--real" in argv:
        for n in argv[argv.index("--real") + 1 :]:
            figures.update(bench_real(int(n)))
    else:
        figures.update(bench_effects("--quick" in argv))
    for name, value in figures.items():
        print(line(name, value, GOALS))


if __name__ == "__main__":
    main(sys.argv[1:])
