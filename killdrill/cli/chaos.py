"""``killdrill chaos`` on the command line: its options, its one-line usage errors, its exit codes."""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from killdrill.drill import DrillOptions
from killdrill.errors import HarnessError, UsageError
from killdrill.faults import fleet
from killdrill.options import check_output_dir, check_output_file
from killdrill.records import Discovery
from killdrill.report.drill import write_json

if TYPE_CHECKING:
    from killdrill.chaos.job import ChaosResult

__all__ = ["DrillFlags", "add_parser", "parse_budget", "parse_kills", "parse_shard"]


@dataclass(frozen=True)
class DrillFlags:
    """What ``killdrill.cli.commands`` shares with this subcommand (passed in: the CLI module sits above):
    the supervisor flags, how they become :class:`DrillOptions`, and the agent's command."""

    add: Callable[..., None]  # (parser, skip=fields) -> None
    options: Callable[[argparse.Namespace], DrillOptions]
    command: Callable[[argparse.Namespace], list[str]]
    positive_int: Callable[[str], Any]
    check: Callable[[argparse.Namespace], None]  # output paths, --root, --ledger-url: before any run


_BUDGET_RE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")


def parse_budget(text: str) -> float:
    """``90s``, ``20m``, ``1.5h`` or plain seconds."""
    m = _BUDGET_RE.match(text.strip())
    if not m:
        raise ValueError(f"--budget {text!r}: expected e.g. 90s, 20m, 1h")
    return float(m[1]) * {"s": 1, "m": 60, "h": 3600, None: 1}[m[2]]


def parse_kills(text: str) -> tuple[int, int]:
    """``2`` or ``1..3``."""
    lo, sep, hi = text.partition("..")
    try:
        a, b = int(lo), int(hi if sep else lo)
    except ValueError:
        raise ValueError(f"--kills {text!r}: expected N or MIN..MAX, e.g. 1..3") from None
    if not 1 <= a <= b:
        raise ValueError(f"--kills {text!r}: need 1 <= MIN <= MAX")
    return a, b


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` with 1 <= K <= N."""
    k, sep, n = text.partition("/")
    try:
        a, b = int(k), int(n)
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected K/N, e.g. 2/4") from None
    if not sep or not 1 <= a <= b:
        raise ValueError(f"--shard {text!r}: need 1 <= K <= N")
    return a, b


def check_corpus(path: str) -> None:
    """``--regressions PATH`` is read and rewritten after the job: a file there that is not a
    corpus, or a folder that cannot be written, is said now, not after every run is spent."""
    from killdrill.chaos.corpus import CORPUS_VERSION

    check_output_file(path, "--regressions")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--regressions {path}: cannot read it: {exc}") from None
    if not text.strip():
        return
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--regressions {path}: not JSON ({exc})") from None
    if (
        not isinstance(data, dict)
        or data.get("version") != CORPUS_VERSION
        or not isinstance(data.get("regressions"), list)
    ):
        raise UsageError(
            f"--regressions {path}: not a killdrill regression corpus (version {CORPUS_VERSION})"
        )


def _cmd_chaos(args: argparse.Namespace, *, flags: DrillFlags) -> int:
    # The job (and Hypothesis under it) is imported when it runs: every other subcommand, and
    # `killdrill --help`, starts without it.
    from killdrill.chaos.job import ChaosOptions, Interrupted, render_text, run_chaos

    command = flags.command(args)
    try:
        budget = parse_budget(args.budget) if args.budget else None
        kills = parse_kills(args.kills)
        shard = parse_shard(args.shard)
        faults = fleet.parse_faults(args.faults)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    runs = args.runs if args.runs is not None else (None if budget is not None else 100)
    drill = flags.options(args)
    flags.check(args)  # --json, --root, --ledger-url
    if args.report:
        check_output_dir(args.report, f"--report {args.report}")
    if args.regressions:
        check_corpus(args.regressions)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    options = ChaosOptions(
        seed=seed,
        runs=runs,
        budget_s=budget,
        min_kills=kills[0],
        max_kills=kills[1],
        shard=shard,
        workers=args.workers or os.cpu_count() or 1,
        report_dir=args.report,
        regressions=args.regressions,
        shrink=not args.no_shrink,
        shrink_runs=args.shrink_runs,
        max_failures=args.max_failures,
        faults=faults,
    )
    if ("upgrade" in faults) != bool(getattr(args, "resume_with", None)):
        raise UsageError("--faults ...,upgrade and --resume-with -- CMD go together (the upgrade's command)")
    print(
        f"killdrill chaos: seed {seed} (reproduce with --seed {seed}), shard {shard[0]}/{shard[1]}",
        file=sys.stderr,
    )
    discovery = None
    if args.discovery:
        try:
            saved = json.loads(Path(args.discovery).read_text(encoding="utf-8"))
            discovery = Discovery.from_dict(saved.get("discovery", saved))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:  # any other JSON shape
            raise UsageError(f"--discovery {args.discovery}: not a saved discovery: {exc}") from exc
        if list(discovery.command) != list(command):
            raise UsageError(
                f"--discovery {args.discovery} was recorded from another command"
                f" ({shlex.join(discovery.command)}), not {shlex.join(command)}"
            )
    try:
        result = run_chaos(command, drill, options, discovery=discovery)
    except Interrupted as stop:
        partial: ChaosResult | None = stop.result
        done = f" after {len(partial.runs)} run(s)" if partial is not None else ""
        where = f"; reports in {options.report_dir}" if options.report_dir and partial is not None else ""
        print(
            f"killdrill chaos: interrupted by {stop.name}{done}; every attempt and worker was stopped"
            f"{where} (seed {seed})",
            file=sys.stderr,
        )
        stop.reported = True
        raise
    data = result.to_dict()
    print(render_text(data))
    if args.json:
        try:
            write_json(args.json, data)
        except OSError as exc:  # checked before the job; the disk may still fill up
            raise HarnessError(
                f"--json {args.json}: cannot write the report: {exc.strerror or exc}"
            ) from None
    return result.exit_code()


def add_parser(sub: Any, flags: DrillFlags) -> None:
    """Register ``killdrill chaos`` with the CLI (``killdrill.cli.commands`` calls it with its ``flags``)."""

    p = sub.add_parser(
        "chaos",
        help="random kill schedules (offsets and inside each boundary interval), shrunk failures",
        description="Run random kill schedules against a command; shrink each failure to named boundaries. "
        "Exit 0 clean, 1 a violation found, 2 harness error.",
    )
    g = p.add_argument_group("chaos")
    g.add_argument(
        "--runs",
        type=flags.positive_int,
        help="random runs in total over all shards (default 100; none with --budget)",
    )
    g.add_argument(
        "--budget",
        metavar="TIME",
        help="stop starting runs this long after discovery, e.g. 20m (runs in flight finish)",
    )
    g.add_argument(
        "--faults",
        default="kill",
        metavar="LIST",
        help="faults drawn: kill (always), pause (the zombie), upgrade (resumes run --resume-with), "
        "net (drop:/reset: toward the HTTP fakes, one run in two)",
    )
    g.add_argument("--seed", type=int, help="seed of the schedules (default: random, printed)")
    g.add_argument("--kills", default="1..3", metavar="MIN..MAX", help="kills per run (1..3)")
    g.add_argument("--shard", default="1/1", metavar="K/N", help="run only the K-th of N disjoint parts")
    g.add_argument("--workers", type=flags.positive_int, help="worker processes (default: cores)")
    g.add_argument(
        "--report", metavar="DIR", help="write chaos.json, plans.jsonl, report.json, junit.xml, report.html"
    )
    g.add_argument("--regressions", metavar="PATH", help="append each distinct shrunk failure to this corpus")
    g.add_argument("--no-shrink", action="store_true", help="report failures as found, unshrunk")
    g.add_argument(
        "--shrink-runs", type=flags.positive_int, default=24, help="cases each shrink may run (24)"
    )
    g.add_argument(
        "--max-failures", type=flags.positive_int, help="stop starting runs after this many violated runs"
    )
    g.add_argument(
        "--discovery",
        metavar="FILE",
        help="reuse a saved discovery (chaos.json of an earlier job, or killdrill points --json): "
        "its catalogue and interval lengths (the schedules' text is the seed's either way)",
    )
    g.add_argument("--json", metavar="FILE", help="also write report.json here")
    flags.add(p, skip=("workers",))  # chaos's --workers are its worker processes
    p.set_defaults(func=functools.partial(_cmd_chaos, flags=flags))
