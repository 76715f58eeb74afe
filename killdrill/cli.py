"""``killdrill points|run|drill|chaos|report|audit ... -- COMMAND...``

Exit codes: 0 every case exactly-once; 1 at least one violation; 2 bad usage or a
harness error, said in one line without a traceback.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from killdrill.errors import ExitCode, HarnessError, KilldrillError, UsageError
from killdrill.options import OPTIONS, Choice, DrillOptions, Flag, Kind, Number, OptionError, Repeated
from killdrill.points import KINDS, ScheduleError

EXIT_OK, EXIT_VIOLATION, EXIT_ERROR = int(ExitCode.OK), int(ExitCode.VIOLATION), int(ExitCode.ERROR)
__all__ = ["UsageError", "add_drill_options", "build_parser", "drill_options", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line (exit 2), like every other killdrill error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class Terminated(BaseException):
    """SIGTERM reached the harness: unwind like Ctrl-C (every attempt killed), exit 143."""


def _on_signal(signum: int, frame: object) -> None:
    # The first signal unwinds; more of them must not interrupt the unwinding (kills, reaping).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Everything after the first ``--`` is the agent's command, untouched by argparse."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _argparse_type(kind: Kind, name: str) -> Callable[[str], Any]:
    """An argparse ``type`` from a table kind: its one parser, its errors in argparse's words."""
    parse = kind.item if isinstance(kind, Repeated) else kind.from_text

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name  # argparse names the type in its messages
    return convert


positive_int = _argparse_type(Number(int, 1, "a whole number >= 1"), "int")


def add_drill_options(p: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
    """The supervisor options shared by points, run, drill and chaos: one flag per row of
    ``killdrill.options.OPTIONS`` (``skip``: fields a subcommand spells its own way)."""
    g = p.add_argument_group("supervisor")
    for row in OPTIONS:
        if row.field in skip:
            continue
        kind = row.kind
        kw: dict[str, Any] = {"dest": row.field, "help": row.help}
        if isinstance(kind, Flag):
            g.add_argument(row.flag, action="store_true", **kw)
            continue
        kw["type"] = _argparse_type(kind, row.field)
        if kind.metavar:
            kw["metavar"] = kind.metavar
        if isinstance(kind, Choice):
            kw["metavar"] = "|".join(kind.choices)
        if isinstance(kind, Repeated):
            g.add_argument(row.flag, action="append", default=[], **kw)
        elif row.flag_const is not None:
            g.add_argument(row.flag, nargs="?", const=row.flag_const, default=row.default, **kw)
        else:
            g.add_argument(row.flag, default=row.default, **kw)
    g.add_argument("--langgraph", action="store_true", help="same as --integration langgraph")


def drill_options(args: argparse.Namespace) -> DrillOptions:
    """The DrillOptions of parsed flags (the flags' values were checked by the table's parsers)."""
    values: dict[str, Any] = {}
    for row in OPTIONS:
        if not hasattr(args, row.field):
            continue
        value = getattr(args, row.field)
        if isinstance(row.kind, Repeated):
            value = row.kind.combine(value)
        values[row.field] = value
    if getattr(args, "langgraph", False):
        values["integrations"] = (*values.get("integrations", ()), "langgraph")
        values["integrations"] = tuple(dict.fromkeys(values["integrations"]))
    if values.get("workers") is None:
        values.pop("workers", None)
    return DrillOptions(**values)


def _need_command(args: argparse.Namespace) -> list[str]:
    if not args.command:
        raise UsageError(
            "no command: put the agent's command after --, e.g. killdrill drill -- python agent.py"
        )
    return list(args.command)


def check_output_file(path: str | None, flag: str) -> None:
    """Fail now, in one line, if ``path`` cannot be written: before any case runs, not after."""
    if not path:
        return
    target = os.path.abspath(path)
    if os.path.isdir(target):
        raise UsageError(f"{flag} {path}: is a folder, expected a file")
    check_output_dir(os.path.dirname(target), f"{flag} {path}")


def check_output_dir(path: str | os.PathLike[str] | None, flag: str) -> None:
    """Make the folder ``path`` (and its parents) and prove a file can be created in it."""
    if path is None:
        return
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".killdrill-probe-"):
            pass
    except OSError as exc:
        blocker = _first_non_folder(os.path.abspath(path))
        why = f"{blocker} is a file, not a folder" if blocker else (exc.strerror or str(exc))
        raise UsageError(f"{flag}: cannot write there: {why}") from None


def _first_non_folder(path: str) -> str | None:
    """The nearest existing ancestor of ``path`` (or itself) when it is not a folder."""
    while path and not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return path if path and not os.path.isdir(path) else None


def check_ledger_url(url: str | None) -> None:
    """A shared ledger that is not a killdrill ledger is said now, in one line (not by the agent's
    traceback when its clean run opens it)."""
    if url is None:
        return
    from killdrill.ledger import Ledger, LedgerError

    try:
        Ledger(url, "kd-check").close()
    except LedgerError as exc:
        raise HarnessError(f"--ledger-url: {str(exc).removeprefix('killdrill: ')}") from None


def check_drill_inputs(args: argparse.Namespace) -> None:
    """Every output path of a command, the drill's root and its ledger, checked before the agent runs."""
    check_output_file(getattr(args, "json", None), "--json")
    if getattr(args, "root", None) is not None:
        check_output_dir(args.root, f"--root {args.root}")
    check_ledger_url(getattr(args, "ledger_url", None))


def _write_json(path: str | None, obj: dict[str, Any]) -> None:
    if path:
        from killdrill.report import write_json

        try:
            write_json(path, obj)
        except OSError as exc:  # checked before the run; the disk may still fill up
            raise HarnessError(f"--json {path}: cannot write the report: {exc.strerror or exc}") from None


def cmd_points(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill
    from killdrill.report import render_catalogue

    command = _need_command(args)
    options = drill_options(args)
    check_drill_inputs(args)
    drill = Drill(command, options)
    discovery = drill.discover()
    print(render_catalogue(discovery))
    _write_json(args.json, discovery.to_dict())
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill

    command = _need_command(args)
    options = drill_options(args)
    check_drill_inputs(args)
    drill = Drill(command, options)
    result = drill.run_case(args.schedule)
    print(result.text())
    _write_json(args.json, {"cases": [result.to_dict()], "summary": _summary([result])})
    return EXIT_OK if result.ok else EXIT_VIOLATION


def _summary(cases: Sequence[Any]) -> dict[str, Any]:
    from killdrill.report import summarize_cases

    return summarize_cases(cases)


def cmd_drill(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill

    command = _need_command(args)
    options = drill_options(args)
    check_drill_inputs(args)
    drill = Drill(command, options)
    discovery = drill.discover()
    schedules = [s.strip() for s in args.points.split(";")] if args.points else None
    total = len(schedules) if schedules is not None else len(discovery.catalogue)
    done = 0
    print(f"killdrill: {total} case(s) over {len(discovery.catalogue)} kill point(s)", file=sys.stderr)

    def progress(case: Any) -> None:
        nonlocal done
        done += 1
        verdict = "exactly-once" if case.ok else "VIOLATED " + ",".join(case.kinds)
        print(f"  [{done}/{total}] {case.schedule:<40} {verdict}", file=sys.stderr, flush=True)

    result = drill.run_all(schedules, on_case=progress)
    print(result.text())
    _write_json(args.json, result.to_dict())
    return EXIT_OK if result.ok else EXIT_VIOLATION


def cmd_report(args: argparse.Namespace) -> int:
    """``killdrill report FILE...``: render saved reports, merged (e.g. chaos shards) into one."""
    from killdrill import chaos
    from killdrill.records import CaseResult, Discovery, DrillResult
    from killdrill.report import load_report, render_cases, render_drill, summarize_cases

    check_output_file(args.json, "--json")
    if all(chaos.is_chaos_report(p) for p in args.files):  # shards of one chaos job
        try:
            merged_chaos = chaos.merge_reports(args.files)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:  # tampered input
            why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__} {exc}"
            raise UsageError(f"not chaos reports of one job (edited by hand?): {why}") from exc
        print(chaos.render_text(merged_chaos))
        _write_json(args.json, merged_chaos)
        return EXIT_VIOLATION if merged_chaos["summary"]["runs_violated"] else EXIT_OK

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
        merged = DrillResult(discoveries[0], tuple(cases))
        print(render_drill(merged))
        data = merged.to_dict()
    else:
        print(render_cases(cases))
        data = {"cases": [c.to_dict() for c in cases], "summary": summarize_cases(cases)}
    _write_json(args.json, data)
    return EXIT_OK if all(c.ok for c in cases) else EXIT_VIOLATION


def _add_report_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="render saved JSON reports as text; several files (chaos shards) are merged",
        description="Render killdrill JSON reports; exit 1 if any case violated exactly-once.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON report(s) from --json or --report")
    p.add_argument("--merge", action="store_true", help="merge the files' cases (the default for several)")
    p.add_argument("--json", metavar="FILE", help="write the merged machine-readable report")
    p.set_defaults(func=cmd_report)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="killdrill",
        description="Kill an agent at named boundaries, resume it, prove each external effect landed once.",
        epilog=f"Kill points: {'|'.join(KINDS)}:NAME[#N][+Xms|~Xs], offset:Xms; a schedule is a "
        "comma-separated list, one kill per attempt. "
        "Exit codes: 0 exactly-once, 1 violation, 2 usage or harness error.",
    )
    from killdrill import __version__

    parser.add_argument("--version", action="version", version=f"killdrill {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="{points,run,drill,chaos,report,audit}")
    sub.required = True

    p = sub.add_parser("points", help="print the kill-point catalogue a clean run reaches")
    add_drill_options(p)
    p.add_argument("--json", metavar="FILE", help="write the catalogue and baseline as JSON")
    p.set_defaults(func=cmd_points)

    p = sub.add_parser("run", help="run one case: a schedule of kills, one per attempt")
    p.add_argument("--schedule", "-s", required=True, help="e.g. before:charge_customer,during:mailbox.send")
    add_drill_options(p)
    p.add_argument("--json", metavar="FILE", help="write the machine-readable report")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("drill", help="discover, then one case per kill point; a table and a summary")
    add_drill_options(p)
    p.add_argument("--points", metavar="S1;S2", help="only these schedules (';'-separated)")
    p.add_argument("--json", metavar="FILE", help="write the machine-readable report")
    p.set_defaults(func=cmd_drill)

    from killdrill import audit, chaos_cli

    chaos_cli.add_parser(sub)
    _add_report_parser(sub)
    audit.add_parser(sub)
    for name in TAKES_COMMAND:
        sub.choices[name].usage = f"killdrill {name} [options] -- COMMAND..."
    return parser


TAKES_COMMAND = ("points", "run", "drill", "chaos")
"""Subcommands whose agent command follows ``--``."""


def _forgot_separator(parser: argparse.ArgumentParser, own: list[str]) -> str | None:
    """``killdrill drill python agent.py``: say where the command goes, not argparse's usage."""
    if not own or own[0] not in TAKES_COMMAND:
        return None
    _, extra = parser.parse_known_args(own)
    if not extra:
        return None
    return (
        f"unrecognized arguments {shlex.join(extra)}: put the agent's command after --, "
        f"e.g. killdrill {own[0]} [options] -- python agent.py --thread '{{thread}}'"
    )


def _print_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    """Setup warnings as one line each (``killdrill: warning: ...``), others as Python prints them."""
    from killdrill.setup_checks import SetupWarning

    if issubclass(category, SetupWarning):
        print(f"killdrill: warning: {message}", file=sys.stderr, flush=True)
    else:
        _python_showwarning(message, category, *args, **kwargs)


_python_showwarning = warnings.showwarning


def _legacy_errors() -> tuple[type[Exception], ...]:
    """Harness errors not yet under KilldrillError (the layered redesign moves them there)."""
    from killdrill.launcher import LaunchError
    from killdrill.ledger import LedgerError
    from killdrill.supervisor import HarnessError

    return (HarnessError, LedgerError, LaunchError)


def main(argv: Sequence[str] | None = None) -> int:
    own, command = _split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not command:
        forgot = _forgot_separator(parser, own)
        if forgot:
            print(f"killdrill: error: {forgot}", file=sys.stderr)
            return EXIT_ERROR
    args = parser.parse_args(own)
    args.command = command
    one_line_errors: tuple[type[Exception], ...] = (KilldrillError, ScheduleError, *_legacy_errors())
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _on_signal)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = _print_warning
            return int(args.func(args))
    except one_line_errors as exc:
        first, _, rest = str(exc).strip().partition("\n")
        print(f"killdrill: error: {first.removeprefix('killdrill: ')}", file=sys.stderr)
        if rest:  # e.g. the tail of a failed clean run's stderr, after the one line
            print(rest, file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("killdrill: interrupted (SIGINT); every agent process was killed", file=sys.stderr)
        return _interrupted(128 + signal.SIGINT, as_program=argv is None)
    except Terminated:
        print("killdrill: terminated (SIGTERM); every agent process was killed", file=sys.stderr)
        return _interrupted(128 + signal.SIGTERM, as_program=argv is None)


def _interrupted(code: int, *, as_program: bool) -> int:
    """As the program, exit now: the launchers' exit handlers run, the interpreter's teardown
    (seconds on a loaded machine, nothing left to save) does not."""
    if not as_program:
        return code
    import atexit

    atexit._run_exitfuncs()  # stops the launcher templates (nothing of any attempt is left)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
