"""``killdrill chaos`` on the command line: its options, its one-line usage errors, its exit codes."""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from killdrill.chaos.options import CHAOS_OPTIONS
from killdrill.cli.report import writing
from killdrill.drill import DrillOptions
from killdrill.errors import UsageError
from killdrill.options import Option, OptionError, Spelling
from killdrill.records import Discovery
from killdrill.report.outputs import check_output_dir, check_output_file

if TYPE_CHECKING:
    from killdrill.chaos.job import ChaosResult

__all__ = ["DrillFlags", "add_parser"]


@dataclass(frozen=True)
class DrillFlags:
    """What ``killdrill.cli.commands`` shares with this subcommand (passed in: the CLI module sits above):
    the supervisor flags, how they become :class:`DrillOptions`, how a table's rows become flags and
    the given ones values, and the agent's command."""

    add: Callable[..., None]  # (parser, skip=fields) -> None
    add_options: Callable[..., Any]  # (parser, title, rows) -> the flags of rows
    given: Callable[[argparse.Namespace, Sequence[Option]], dict[str, Any]]  # flags given, as typed
    options: Callable[[argparse.Namespace], DrillOptions]
    command: Callable[[argparse.Namespace], list[str]]
    check: Callable[[argparse.Namespace], None]  # output paths, --root, --ledger-url: before any run


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
    values = flags.given(args, CHAOS_OPTIONS)
    if "runs" not in values and "budget_s" in values:
        values["runs"] = None  # until the budget ends
    values.setdefault("seed", random.SystemRandom().randrange(2**32))
    former = args.former_workers is not None and "processes" not in values  # chaos --workers N
    if former:
        values["processes"] = args.former_workers
    values.setdefault("processes", os.cpu_count() or 1)
    try:
        options = ChaosOptions(**values, spelled=Spelling.FLAG)  # parsed and checked once, naming the flags
    except OptionError as exc:
        raise OptionError(str(exc).replace("--processes", "--workers")) if former else exc from None
    if former:
        print("killdrill chaos: --workers is now --processes (worker processes)", file=sys.stderr)
    drill = flags.options(args)
    flags.check(args)  # --json, --root, --ledger-url
    if args.report_dir:
        check_output_dir(args.report_dir, f"--report {args.report_dir}")
    if args.regressions:
        check_corpus(args.regressions)
    seed, shard = options.seed, options.shard
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
    print(render_text(result.data()))  # the runs read from disk, not held
    if args.json:
        with writing("--json", args.json):  # checked before the job; the disk may still fill up
            result.write_json(args.json)
    return result.exit_code()


def add_parser(sub: Any, flags: DrillFlags) -> None:
    """Register ``killdrill chaos`` with the CLI (``killdrill.cli.commands`` calls it with its ``flags``)."""

    p = sub.add_parser(
        "chaos",
        help="random kill schedules (offsets and inside each boundary interval), shrunk failures",
        description="Run random kill schedules against a command; shrink each failure to named boundaries. "
        "Exit 0 clean, 1 a violation found, 2 harness error.",
    )
    g = flags.add_options(p, "chaos", CHAOS_OPTIONS)
    g.add_argument(
        "--discovery",
        metavar="FILE",
        help="reuse a saved discovery (chaos.json of an earlier job, or killdrill points --json): "
        "its catalogue and interval lengths (the schedules' text is the seed's either way)",
    )
    g.add_argument("--json", metavar="FILE", help="also write report.json here")
    g.add_argument("--workers", dest="former_workers", default=None, help=argparse.SUPPRESS)
    flags.add(p, skip=("workers",))  # chaos's --workers: another spelling of --processes
    p.set_defaults(func=functools.partial(_cmd_chaos, flags=flags))
