"""``killdrill points|run|drill|chaos|report|audit|conform ... -- COMMAND...``

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
from collections.abc import Sequence
from typing import Any, NoReturn

from killdrill import audit
from killdrill.cli import chaos as chaos_cli
from killdrill.cli import clean as clean_cli
from killdrill.cli import conform as conform_cli
from killdrill.cli import report as report_cli
from killdrill.cli.chaos import DrillFlags
from killdrill.cli.suggest import all_flags, unknown_flag_hint
from killdrill.drill import DrillOptions
from killdrill.errors import ExitCode, HarnessError, KilldrillError, UsageError, one_line
from killdrill.integrations import canonical_names, known, option_rows
from killdrill.options import (
    OPTIONS,
    Choice,
    Flag,
    Option,
    OptionError,
    Repeated,
    Spelling,
    from_fields,
)
from killdrill.points import KINDS
from killdrill.process.interrupts import Interrupted, signals_raise
from killdrill.records import Verdict
from killdrill.report.drill import render_case, render_drill
from killdrill.report.outputs import check_output_dir, check_output_file


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line (exit 2), like every other killdrill error."""

    def error(self, message: str) -> NoReturn:
        from killdrill.cli.suggest import suggest

        root = getattr(self, "root", None) or self
        message = suggest(message, self, all_flags(root))
        self.exit(ExitCode.ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Everything after the first ``--`` is the agent's command, untouched by argparse."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def add_options(
    p: argparse.ArgumentParser, title: str, rows: Sequence[Option], *, skip: Sequence[str] = ()
) -> argparse._ArgumentGroup:
    """One flag per row with a flag (``skip``: fields a subcommand spells its own way).  The flags
    keep their text: the options value they build parses and checks it, once, naming the flag."""
    g = p.add_argument_group(title)
    for row in rows:
        if row.field in skip or not row.flag:
            continue
        kind = row.kind
        kw: dict[str, Any] = {"dest": row.field, "help": row.help, "default": None}
        if isinstance(kind, Flag):  # a switch; a row on by default is turned off by its flag
            g.add_argument(row.flag, action="store_false" if row.default else "store_true", **kw)
            continue
        if kind.metavar:
            kw["metavar"] = kind.metavar
        if isinstance(kind, Choice):
            kw["metavar"] = "|".join(kind.choices)
        if isinstance(kind, Repeated):
            g.add_argument(row.flag, action="append", **kw)
        elif row.flag_const is not None:
            g.add_argument(row.flag, nargs="?", const=row.flag_const, **kw)
        else:
            g.add_argument(row.flag, **kw)
    return g


def given(args: argparse.Namespace, rows: Sequence[Option]) -> dict[str, Any]:
    """The options of ``rows`` given on the command line, as typed (``--kills`` into its fields)."""
    values: dict[str, Any] = {}
    for row in rows:
        value = getattr(args, row.field, None)
        if value is None:
            continue
        if row.into:  # one flag, several fields: parsed here, each field checked by its own row
            try:
                parts = row.kind.from_value(value)
            except OptionError as exc:
                raise OptionError(f"{row.flag}: {exc}") from None
            values.update(zip(row.into, parts, strict=True))
        else:
            values[row.field] = value
    return values


def add_drill_options(p: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
    """The supervisor options shared by points, run, drill and chaos: one flag per row of
    ``killdrill.options.OPTIONS`` (``skip``: fields a subcommand spells its own way)."""
    g = add_options(p, "supervisor", OPTIONS, skip=skip)
    add_options(p, "integrations' options (each needs its --integration)", option_rows())
    for integration in known().values():  # the records' shortcut flags
        if integration.flag:
            g.add_argument(
                integration.flag,
                action="append_const",
                const=integration.name,
                dest="integration_flags",
                help=f"same as --integration {integration.name}",
            )


def drill_options(args: argparse.Namespace) -> DrillOptions:
    """The DrillOptions of the flags: parsed and checked once, by DrillOptions, naming the flags."""
    values = {**given(args, option_rows()), **given(args, OPTIONS)}
    names = [*values.get("integrations", ()), *(getattr(args, "integration_flags", None) or ())]
    if names:
        values["integrations"] = list(canonical_names(names))
    return from_fields(values, Spelling.FLAG)


def _need_command(args: argparse.Namespace) -> list[str]:
    if not args.command:
        raise UsageError(
            "no command: put the agent's command after --, e.g. killdrill drill -- python agent.py"
        )
    return list(args.command)


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
        from killdrill.report.drill import write_json

        with report_cli.writing("--json", path):  # checked before the run; the disk may still fill up
            write_json(path, obj)


def cmd_points(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill
    from killdrill.report.drill import render_catalogue

    command = _need_command(args)
    options = drill_options(args)
    check_drill_inputs(args)
    drill = Drill(command, options)
    discovery = drill.discover()
    print(render_catalogue(discovery))
    _write_json(args.json, discovery.to_dict())
    return ExitCode.OK


def cmd_run(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill

    command = _need_command(args)
    options = drill_options(args)
    check_drill_inputs(args)
    drill = Drill(command, options)
    result = drill.run_case(args.schedule)
    print(render_case(result))
    _write_json(args.json, {"cases": [result.to_dict()], "summary": _summary([result])})
    return ExitCode.OK if result.ok else ExitCode.VIOLATION


def _summary(cases: Sequence[Any]) -> dict[str, Any]:
    from killdrill.report.drill import summarize_cases

    return summarize_cases(cases)


def _points(text: str | None) -> list[str] | None:
    """``--points S1;S2``: each schedule named (an empty one would run a clean case called none)."""
    if text is None:
        return None
    schedules = [s.strip() for s in text.split(";")]
    if not any(schedules) or not all(schedules):
        raise UsageError(
            f"--points {text!r}: an empty schedule between ';': expected S1;S2 (before:charge;after:charge)"
        )
    return schedules


def cmd_drill(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill

    command = _need_command(args)
    options = drill_options(args)
    check_drill_inputs(args)
    schedules = _points(args.points)
    if args.report:
        check_output_dir(args.report, f"--report {args.report}")
    drill = Drill(command, options)
    discovery = drill.discover()
    total = len(schedules) if schedules is not None else len(discovery.catalogue)
    done = 0
    print(f"killdrill: {total} case(s) over {len(discovery.catalogue)} kill point(s)", file=sys.stderr)

    def progress(case: Any) -> None:
        nonlocal done
        done += 1
        verdict = str(Verdict.EXACTLY_ONCE) if case.ok else "VIOLATED " + ",".join(case.kinds)
        count = f"{done:>{len(str(total))}}/{total}"  # padded: the column does not shift at 10/22
        print(f"  [{count}] {case.schedule:<40} {verdict}", file=sys.stderr, flush=True)

    result = drill.run_all(schedules, on_case=progress)
    print(render_drill(result))
    _write_json(args.json, result.to_dict())
    if args.report:
        from killdrill.report.drill_html import write_drill_reports

        with report_cli.writing("--report", args.report):
            write_drill_reports(args.report, result.to_dict(), command)
        print(f"killdrill: report in {os.path.join(args.report, 'report.html')}", file=sys.stderr)
    return ExitCode.OK if result.ok else ExitCode.VIOLATION


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="killdrill",
        description="Kill an agent at named boundaries, resume it, prove each external effect landed once.",
        epilog=POINT_GRAMMAR + " Exit codes: 0 exactly-once, 1 violation, 2 usage or harness error.",
    )
    from killdrill import __version__

    parser.add_argument("--version", action="version", version=f"killdrill {__version__}")
    sub = parser.add_subparsers(
        dest="subcommand", metavar="{points,run,drill,chaos,report,audit,conform,clean}"
    )
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

    p = sub.add_parser(
        "drill",
        help="discover, then one case per kill point; a table and a summary",
        description="Run the agent clean (discovery: its kill points and the baseline ledger), then one "
        "case per kill point: kill the agent's whole process tree there, resume it with the same "
        "thread and workdir, and judge the ledger against the baseline, effect by effect. Prints a "
        "table of the cases, the failed cases' verdicts with their reproduction lines, then the "
        "totals; exit 0 when every case was exactly-once, 1 on a violation, 2 on bad usage.",
        epilog=POINT_GRAMMAR,
    )
    add_drill_options(p)
    p.add_argument("--points", metavar="S1;S2", help="only these schedules (';'-separated)")
    p.add_argument("--json", metavar="FILE", help="write the machine-readable report")
    p.add_argument("--report", metavar="DIR", help="write report.json and a self-contained report.html")
    p.set_defaults(func=cmd_drill)

    # commands defined next to what they drive register themselves; chaos shares the drill flags
    flags = DrillFlags(
        add=add_drill_options,
        add_options=add_options,
        given=given,
        options=drill_options,
        command=_need_command,
        check=check_drill_inputs,
    )
    chaos_cli.add_parser(sub, flags)
    report_cli.add_parser(sub)
    conform_cli.add_parser(sub)
    audit.add_parser(sub)
    clean_cli.add_parser(sub)
    for name in TAKES_COMMAND:
        sub.choices[name].usage = f"killdrill {name} [options] -- COMMAND..."
    return parser


POINT_GRAMMAR = (
    f"Kill points: {'|'.join(k for k in KINDS if k != 'during')}:NAME[#N], during:PROVIDER.OP[#N], "
    "each optionally +Xms (that long after it), ~Xs (held there that long, no kill) or +F% (POINT+F%: "
    "F percent of the way to the next boundary); start+F% (of the way from spawn to the first "
    "boundary), offset:Xms (from spawn). Fleet faults: pause:POINT[@OTHER] (the zombie: stop "
    "the attempt there, resume meanwhile), drop:PROVIDER.OP[#N][~Xs] (the provider commits, the "
    "response is lost), reset:PROVIDER.OP[#N] (the connection is reset before processing). "
    "powerloss:POINT: killed there, then the workdir loses every write not fsynced (needs FUSE; in "
    "a deployment powerloss:NAME:POINT takes every process down, then boots them). A "
    "schedule is a comma-separated list, one item per attempt."
)
"""The point grammar as every help text states it (killdrill.points parses it)."""

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
    """Setup and plugin warnings as one line each (``killdrill: warning: ...``), others as Python
    prints them."""
    from killdrill.drill.setup_checks import SetupWarning
    from killdrill.registry import PluginWarning

    if issubclass(category, SetupWarning | PluginWarning):
        print(f"killdrill: warning: {message}", file=sys.stderr, flush=True)
    else:
        _python_showwarning(message, category, *args, **kwargs)


_python_showwarning = warnings.showwarning


def split_upgrade(command: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """``OLD... --resume-with -- NEW...``: the first command, and the upgrade's (killdrill.faults.fleet)."""
    command = list(command)
    for i in range(len(command) - 1):
        if command[i] == "--resume-with" and command[i + 1] == "--":
            new = command[i + 2 :]
            if not new:
                raise UsageError("--resume-with -- needs the new version's command after it")
            return command[:i], new
    return command, None


def _bare_word_before_unknown_flag(own: Sequence[str], parser: argparse.ArgumentParser) -> bool:
    """True when a word that is no flag's value comes before the first unknown ``--flag`` (or
    there is no unknown flag): the words look like an agent's command, not a typo of ours."""
    known = set(all_flags(parser))
    previous = ""
    for word in own[1:]:  # after the subcommand
        name = word.split("=", 1)[0]
        if name.startswith("-"):
            if name.startswith("--") and name not in known:
                return False
        elif not (previous.startswith("--") and "=" not in previous):
            return True
        previous = word
    return True


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _print_warning  # from the first: a broken plugin is said while parsing
    own, command = _split_command(sys.argv[1:] if argv is None else argv)
    try:
        command, upgrade = split_upgrade(command)
    except UsageError as exc:
        print(f"killdrill: error: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    parser = build_parser()
    if not command and _bare_word_before_unknown_flag(own, parser):  # an agent's command with no
        forgot = _forgot_separator(parser, own)  # -- before it: its flags are not ours to correct
        if forgot:
            print(f"killdrill: error: {forgot}", file=sys.stderr)
            return ExitCode.ERROR
    mistyped = unknown_flag_hint(own, parser)
    if mistyped:  # before argparse, which would complain of something else (a required flag)
        print(f"killdrill: error: unknown option {mistyped}", file=sys.stderr)
        return ExitCode.ERROR
    args = parser.parse_args(own)
    args.command = command
    if upgrade is not None:
        if getattr(args, "resume_with", None):
            print("killdrill: error: --resume-with given twice (flag and trailing form)", file=sys.stderr)
            return ExitCode.ERROR
        args.resume_with = upgrade
    try:
        with signals_raise(only_default=True), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = _print_warning
            code = int(args.func(args))
            sys.stdout.flush()  # a reader that left is met here, not in the interpreter's last flush
            return code
    except BrokenPipeError:  # our reader left (``killdrill drill ... | head``): as a Unix tool, quietly
        return _reader_gone()
    except KilldrillError as exc:  # usage and harness errors alike: one line (then any context), exit 2
        first, rest = one_line(exc)
        print(f"killdrill: error: {first}", file=sys.stderr)
        if rest:  # e.g. the tail of a failed clean run's stderr, after the one line
            print(rest, file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:  # SIGINT while someone else's handler was installed
        print(f"killdrill: interrupted (SIGINT); every agent process was killed{_kept()}", file=sys.stderr)
        return _interrupted(128 + signal.SIGINT, as_program=argv is None)
    except Interrupted as stop:
        if not stop.reported:
            how = "interrupted" if stop.signum == signal.SIGINT else "terminated"
            print(f"killdrill: {how} ({stop.name}); every agent process was killed{_kept()}", file=sys.stderr)
        # a chaos job (it reports its own stop) stopped every worker and attempt itself; its fork
        # templates exit when their socket closes, so it skips the exit handlers' graceful wait
        return _interrupted(stop.code, as_program=argv is None, exit_handlers=not stop.reported)


def _reader_gone() -> int:
    """Standard output's reader closed the pipe: what is left to print goes nowhere (the
    interpreter's last flush too), and the exit code is a SIGPIPE's, as ``head`` leaves a tool."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _kept() -> str:
    """Where an interrupted drill's workdirs stay (every kept folder is named): a root it made
    (``killdrill clean`` removes it), or each workdir left in the ``--root`` given (yours)."""
    from killdrill.drill import unfinished_roots, workdirs_left_in_given_roots

    said = ""
    roots = ", ".join(map(str, unfinished_roots()))
    if roots:
        said += f"; its workdirs are kept at {roots} (killdrill clean removes them)"
    left = workdirs_left_in_given_roots()
    if left:
        named = ", ".join(map(str, left[:_NAMED]))
        more = f" and {len(left) - _NAMED} more beside them" if len(left) > _NAMED else ""
        said += f"; its workdirs are kept at {named}{more}"
    return said


_NAMED = 5
"""Workdirs named one by one in an interrupted drill's line (a wide drill's, the first of them)."""


def _interrupted(code: int, *, as_program: bool, exit_handlers: bool = True) -> int:
    """As the program, exit now: the fork templates' exit handlers run (unless ``exit_handlers`` is
    False), the interpreter's teardown (seconds on a loaded machine, nothing left to save) does not."""
    if not as_program:
        return code
    import atexit

    if exit_handlers:
        atexit._run_exitfuncs()  # stops the fork templates (nothing of any attempt is left)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
