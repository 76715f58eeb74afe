"""The bundled deployments drilled over and over beside a CPU hog, keeping every wrong verdict.

    python -m tests.detection.deployed --out DIR [--rounds 10] [--hog 3] [--only NAME ...]

Each topology is drilled as a user deploys it (``--serve`` services beside a driver): the DBOS
web app and its client, the Temporal worker pair (two replicas, the killed one kept down 8 s so
the survivor takes its activity over) and its starter, the Celery workers (two replicas) and
their submitter, the FastAPI + DBOS refund service (the stripe SDK refunding a PaymentIntent
declared with ``--existing``; its bug: every request a new workflow, so a re-sent request refunds
twice) and the Celery task writing its receipt row into the app's own database (read with
``--effect-table``; its bug: a plain ``INSERT`` without ``ON CONFLICT DO NOTHING``).  Each round
runs the correct variant at every point of its catalogue and the planted bug at each point it
must be caught at.  ``--hog N`` runs N busy Python
processes for the whole run (stopped at its end): the verdict must not depend on timing the
agent does not control.  A correct case that reports anything is a false alarm, a bug's case
that reports no ``duplicate_effect`` a miss: its JSON goes to ``DIR/bad/`` and its workdir is
kept.  One JSON line per case goes to ``DIR/cases.jsonl``; the totals are printed at the end
with the load average beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from killdrill.drill import Drill
from killdrill.options import DrillOptions, convert
from killdrill.records import DUPLICATE_EFFECT, CaseResult

EX = "killdrill.examples"


@dataclass(frozen=True)
class Topology:
    name: str
    driver: list[str]
    serve: dict[str, str]  # name -> command; "{bug}" is filled with the bug's flags or nothing
    catch: tuple[str, ...]  # where the planted bug must be caught
    options: dict[str, Any] = field(default_factory=dict)
    bug_in_driver: bool = False
    bug: str = "--bug unkeyed"  # the flags that plant the bug
    existing: str = ""  # TOML of the objects every run's fakes hold (--existing), written beside the runs


RECEIPTS = Path(__file__).parents[1] / "agents" / "db" / "receipts_celery.py"

TOPOLOGIES = (
    Topology(
        "outbox_dbos",
        ["python", "-m", f"{EX}.outbox_client", "--url", "http://127.0.0.1:{port}", "--order", "{thread}"],
        {"app": f"python -m {EX}.outbox_dbos --port {{port}} --workdir {{workdir}} {{bug}}"},
        ("app:during:mailbox.send", "app:after:send_order_notification"),
        {"integrations": ("dbos",)},
    ),
    Topology(
        "transfer_temporal",
        [
            "python",
            "-m",
            f"{EX}.transfer_temporal",
            "starter",
            "--thread",
            "{thread}",
            "--task-queue",
            "{thread}",
        ],
        {"worker": f"python -m {EX}.transfer_temporal worker --task-queue {{thread}} {{bug}}"},
        ("worker:during:payments.charge", "worker:after:withdraw"),
        {
            "integrations": ("temporal",),
            "replicas": {"worker": 2},
            "restart_delay": 8.0,
            "ready": {"worker": "log:worker polling"},
        },
    ),
    Topology(
        "checkout_celery",
        ["python", "-m", f"{EX}.checkout_celery", "submit", "--thread", "{thread}", "--workdir", "{workdir}"],
        {"worker": f"python -m {EX}.checkout_celery worker --name w{{replica}} --workdir {{workdir}}"},
        ("worker:during:payments.charge", "worker:after:checkout"),
        {"integrations": ("celery",), "replicas": {"worker": 2}},
        bug_in_driver=True,
    ),
    Topology(
        "refund_dbos",
        ["python", "-m", f"{EX}.refund_client", "--url", "http://127.0.0.1:{port}", "--refund", "{thread}",
         "--payment-intent", "pi_refundable_1", "--amount", "2500"],
        {"app": f"python -m {EX}.refund_dbos --port {{port}} --workdir {{workdir}} {{bug}}"},
        ("app:during:payments.refund",),
        {"integrations": ("dbos",), "http_fakes": True},
        bug="--bug new_workflow",
        existing='[[stripe.payment_intents]]\nid = "pi_refundable_1"\namount = 10000\ncurrency = "usd"\n',
    ),
    Topology(
        "receipts_celery",
        ["python", str(RECEIPTS), "submit", "--thread", "{thread}", "--workdir", "{workdir}"],
        {"worker": f"python {RECEIPTS} worker --name w{{replica}}"},
        ("worker:after:charge_order",),
        {
            "integrations": ("celery",),
            "replicas": {"worker": 2},
            "effect_table": convert("effect_table", "receipts(order_id)", "receipts_celery"),
            "effect_db": "sqlite:///{workdir}/app.db",
            "env": {"DATABASE_URL": "{KILLDRILL_EFFECT_DB}"},
        },
        bug_in_driver=True,
        bug="--bug plain",
    ),
)  # fmt: skip


def _options(top: Topology, root: Path, bug: bool) -> tuple[list[str], DrillOptions]:
    flags = top.bug if bug else ""
    serve = {k: v.replace("{bug}", "" if top.bug_in_driver else flags).strip() for k, v in top.serve.items()}
    driver = [*top.driver, *(flags.split() if bug and top.bug_in_driver else [])]
    extra: dict[str, Any] = {}
    if top.existing:
        root.mkdir(parents=True, exist_ok=True)
        (root / "existing.toml").write_text(top.existing)
        extra["existing"] = str(root / "existing.toml")
    options = DrillOptions(
        root=root, keep=True, timeout=180, discovery_runs=1, serve=serve, **top.options, **extra
    )
    return driver, options


def _hog(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _judge(top: Topology, bug: bool, point: str, case: CaseResult, out: Path, totals: dict[str, Any]) -> None:
    """Count one case; keep it (JSON in ``bad/``, workdir) when its verdict is wrong."""
    wrong = DUPLICATE_EFFECT not in case.kinds if bug else not case.ok
    why = ("miss" if bug else "false alarm") if wrong else ""
    totals["cases"] += 1
    totals["bug_cases" if bug else "correct_cases"] += 1
    if why:
        totals["misses" if bug else "false_alarms"] += 1
        text = json.dumps(case.to_dict(), indent=1, default=str)
        (out / "bad" / f"{top.name}-{totals['cases']:05d}.json").write_text(text)
        print(f"WRONG {top.name} {case.schedule}: {why}: {', '.join(case.kinds)}", flush=True)
    row = {"topology": top.name, "bug": bug, "point": point, "kinds": list(case.kinds), "wrong": why}
    row.update(causes=[v.cause for v in case.violations], workdir=case.workdir)
    with open(out / "cases.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    if not why:
        shutil.rmtree(case.workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.detection.deployed", description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--hog", type=int, default=3, help="busy processes beside the drills")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--no-bugs", action="store_true", help="the correct variants only")
    args = parser.parse_args(argv)
    out: Path = args.out
    (out / "bad").mkdir(parents=True, exist_ok=True)
    totals: dict[str, Any] = {"cases": 0, "correct_cases": 0, "bug_cases": 0, "false_alarms": 0, "misses": 0}
    loads: list[float] = []
    hogs = _hog(args.hog)
    try:
        for top in TOPOLOGIES:
            if args.only and top.name not in args.only:
                continue
            for bug in (False,) if args.no_bugs else (False, True):
                t0 = time.monotonic()
                variant = "bug" if bug else "correct"
                driver, options = _options(top, out / "work" / f"{top.name}-{variant}", bug)
                with Drill(driver, options) as drill:
                    points = list(top.catch) if bug else drill.points()
                    for _ in range(args.rounds):
                        for point in points:
                            case = drill.run_case(point)
                            loads.append(os.getloadavg()[0])
                            _judge(top, bug, point, case, out, totals)
                took = time.monotonic() - t0
                print(
                    f"{top.name} ({variant}): {args.rounds * len(points)} cases in {took:.0f} s", flush=True
                )
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    if loads:
        loads.sort()
        totals.update(load_min=round(loads[0], 1), load_max=round(loads[-1], 1))
        totals["load_median"] = round(loads[len(loads) // 2], 1)
    totals["hog"] = args.hog
    print(json.dumps(totals), flush=True)
    (out / "totals.json").write_text(json.dumps(totals))
    return 1 if totals["false_alarms"] or totals["misses"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
