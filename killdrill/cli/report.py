"""``killdrill report FILE...`` on the command line: saved JSON reports rendered, several merged.

The rendering and the merging live below the CLI (:mod:`killdrill.report.drill`,
:mod:`killdrill.chaos.report`); this module only wires them to argparse and exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from killdrill.errors import ExitCode, HarnessError, UsageError
from killdrill.records import CaseResult, Discovery, DrillResult
from killdrill.report.drill import load_report, render_cases, render_drill, summarize_cases, write_json

__all__ = ["add_parser", "writing"]


@contextlib.contextmanager
def writing(flag: str, path: str) -> Iterator[None]:
    """An output file the user named (``--json``, ``--report``) that cannot be written (a folder,
    no permission, a full disk): one line and exit 2, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise HarnessError(f"{flag} {path}: cannot write the report: {exc.strerror or exc}") from None


def _cmd_report(args: argparse.Namespace) -> int:
    """``killdrill report FILE...``: render saved reports, merged (e.g. chaos shards) into one."""
    from killdrill.chaos.report import is_chaos_report  # not paid by other subcommands
    from killdrill.chaos.report import render_text as render_chaos_text
    from killdrill.chaos.stream import merged_reports, write_json_stream

    if all(is_chaos_report(p) for p in args.files):  # shards of one chaos job
        try:
            with merged_reports(args.files) as merged_chaos:
                print(render_chaos_text(merged_chaos))
                if args.json:
                    with writing("--json", args.json):
                        write_json_stream(Path(args.json), merged_chaos)
                violated = merged_chaos["summary"]["runs_violated"]
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:  # tampered input
            why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__} {exc}"
            raise UsageError(f"not chaos reports of one job (edited by hand?): {why}") from exc
        return ExitCode.VIOLATION if violated else ExitCode.OK

    discoveries: list[Discovery] = []
    cases: list[CaseResult] = []
    for path in args.files:
        try:
            discovery, found = load_report(path)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        if discovery is not None:
            discoveries.append(discovery)
        cases.extend(found)
    if discoveries and all(d.command == discoveries[0].command for d in discoveries):
        merged: Any = DrillResult(discoveries[0], tuple(cases))
        print(render_drill(merged))
        data = merged.to_dict()
    else:
        print(render_cases(cases))
        data = {"cases": [c.to_dict() for c in cases], "summary": summarize_cases(cases)}
    if args.json:
        with writing("--json", args.json):
            write_json(args.json, data)
    return ExitCode.OK if all(c.ok for c in cases) else ExitCode.VIOLATION


def add_parser(sub: Any) -> None:
    """Register ``killdrill report`` with the CLI (``killdrill.cli.commands`` calls it)."""
    p = sub.add_parser(
        "report",
        help="render saved JSON reports as text; several files (chaos shards) are merged",
        description="Render killdrill JSON reports; exit 1 if any case violated exactly-once.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON report(s) from --json or --report")
    p.add_argument("--merge", action="store_true", help="kept for scripts: several files are always merged")
    p.add_argument("--json", metavar="FILE", help="write the merged machine-readable report")
    p.set_defaults(func=_cmd_report)
