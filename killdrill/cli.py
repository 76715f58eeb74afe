"""``killdrill points|run|drill|chaos|report|audit ... -- COMMAND...``

Exit codes: 0 every case exactly-once; 1 at least one violation; 2 bad usage or a
harness error, said in one line without a traceback.
"""

from __future__ import annotations

import argparse
import math
import shlex
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from killdrill import audit, chaos_cli, report_cli
from killdrill.chaos_cli import DrillFlags
from killdrill.drill import DrillOptions
from killdrill.errors import ExitCode, HarnessError, UsageError
from killdrill.interrupts import Interrupted, signals_raise
from killdrill.points import KINDS
from killdrill.report import render_case, render_drill


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line (exit 2), like every other killdrill error."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(kind: type[int] | type[float], minimum: float, what: str) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` number at least ``minimum`` (``what`` names the bound)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


positive_seconds = _number(float, 1e-3, "a number of seconds > 0")
non_negative_seconds = _number(float, 0.0, "a number of seconds >= 0")
positive_int = _number(int, 1, "a whole number >= 1")


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Everything after the first ``--`` is the agent's command, untouched by argparse."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def add_drill_options(p: argparse.ArgumentParser) -> None:
    """The supervisor options shared by points, run, drill and chaos (DrillOptions fields)."""
    g = p.add_argument_group("supervisor")
    g.add_argument(
        "--timeout", type=positive_seconds, default=60.0, help="seconds per attempt; longer is a hang (60)"
    )
    g.add_argument(
        "--max-attempts", type=positive_int, help="attempts per case (default: kills in the schedule + 3)"
    )
    g.add_argument(
        "--http-fakes", action="store_true", help="serve the fakes on 127.0.0.1 (KILLDRILL_FAKES_URL)"
    )
    g.add_argument(
        "--smtp-fake", action="store_true", help="an SMTP server on 127.0.0.1 (KILLDRILL_SMTP): mailbox.send"
    )
    g.add_argument(
        "--hook",
        action="append",
        default=[],
        metavar="PATTERN=keyed|naive",
        help="semantics of /hooks routes matching PATTERN (default: keyed iff the request has a key)",
    )
    g.add_argument(
        "--hook-key-header", default="Idempotency-Key", help="header the /hooks sink reads a key from"
    )
    g.add_argument(
        "--identity",
        action="append",
        default=[],
        metavar="PROVIDER.OP=F1,F2",
        help="fields that identify one logical effect of an op (default: the whole stable payload)",
    )
    g.add_argument("--between", metavar="CMD", help="command run between attempts (reconciliation)")
    g.add_argument(
        "--signal", choices=["KILL", "TERM"], default="KILL", help="TERM: drain drill (SIGKILL after --grace)"
    )
    g.add_argument(
        "--grace", type=non_negative_seconds, default=5.0, help="seconds between SIGTERM and SIGKILL (5)"
    )
    g.add_argument("--integration", action="append", default=[], metavar="NAME", help="e.g. langgraph")
    g.add_argument("--langgraph", action="store_true", help="same as --integration langgraph")
    g.add_argument(
        "--resumers", type=positive_int, default=1, help="concurrent resumers after the first kill"
    )
    g.add_argument("--barrier", metavar="POINT", help="with --resumers: the only point that is a barrier")
    g.add_argument(
        "--env", action="append", default=[], metavar="K=V", help="extra environment for the agent"
    )
    g.add_argument("--cwd", help="working directory of the agent (default: the current one)")
    g.add_argument("--root", help="where case workdirs go (default: a new temporary folder)")
    g.add_argument("--keep", action="store_true", help="keep passing workdirs too (failing ones always are)")
    g.add_argument(
        "--discovery-runs",
        type=positive_int,
        default=2,
        help="clean runs in discovery (2 name volatile fields)",
    )
    g.add_argument("--ledger-url", help="a shared SQLAlchemy URL for the ledger (default: SQLite per case)")
    g.add_argument(
        "--launcher",
        choices=["spawn", "fork"],
        default="spawn",
        help="fork: attempts forked from a template that imported the agent's modules once (python agents)",
    )
    g.add_argument("--preload", action="append", default=[], metavar="MODULE", help="with --launcher fork")
    g.add_argument(
        "--check",
        action="append",
        default=[],
        choices=["compensation_order"],
        help="opt-in verdict check: compensation_order (undo operations in reverse order of their actions)",
    )
    g.add_argument(
        "--model-script",
        metavar="FILE",
        help="serve a scripted model (OpenAI /v1/chat/completions, Anthropic /v1/messages) on the HTTP "
        "fakes; sets OPENAI_BASE_URL and ANTHROPIC_BASE_URL for the agent",
    )
    g.add_argument(
        "--model-variance",
        type=int,
        nargs="?",
        const=0,
        metavar="SEED",
        help="each attempt gets other wording, tool-call ids and $vary values (seeded; default seed 0)",
    )


def drill_options(args: argparse.Namespace) -> DrillOptions:
    identity: dict[str, list[str]] = {}
    for item in args.identity:
        op, sep, fields = item.partition("=")
        if not sep or "." not in op or not fields:
            raise UsageError(f"--identity {item!r}: expected PROVIDER.OP=FIELD1,FIELD2")
        identity[op] = [f for f in fields.split(",") if f]
    env: dict[str, str] = {}
    for item in args.env:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        env[k] = v
    hooks: dict[str, str] = {}
    for item in args.hook:
        pattern, sep, mode = item.rpartition("=")
        if not sep or not pattern or mode not in ("keyed", "naive"):
            raise UsageError(f"--hook {item!r}: expected PATTERN=keyed or PATTERN=naive")
        hooks[pattern] = mode
    integrations = tuple(dict.fromkeys([*args.integration, *(["langgraph"] if args.langgraph else [])]))
    return DrillOptions(
        root=args.root,
        timeout=args.timeout,
        max_attempts=args.max_attempts,
        identity=identity,
        http_fakes=args.http_fakes,
        smtp_fake=args.smtp_fake,
        hooks=hooks,
        hook_key_header=args.hook_key_header,
        between=shlex.split(args.between) if args.between else None,
        env=env,
        cwd=args.cwd,
        keep=args.keep,
        signal=args.signal,
        grace=args.grace,
        integrations=integrations,
        discovery_runs=args.discovery_runs,
        ledger_url=args.ledger_url,
        resumers=args.resumers,
        barrier=args.barrier,
        workers=getattr(args, "workers", 1) or 1,
        launcher=args.launcher,
        preload=tuple(args.preload),
        checks=tuple(args.check),
        model_script=args.model_script,
        model_variance=args.model_variance,
    )


def _need_command(args: argparse.Namespace) -> list[str]:
    if not args.command:
        raise UsageError(
            "no command: put the agent's command after --, e.g. killdrill drill -- python agent.py"
        )
    return list(args.command)


def _write_json(path: str | None, obj: dict[str, Any]) -> None:
    if path:
        from killdrill.report import write_json

        write_json(path, obj)


def cmd_points(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill
    from killdrill.report import render_catalogue

    drill = Drill(_need_command(args), drill_options(args))
    discovery = drill.discover()
    print(render_catalogue(discovery))
    _write_json(args.json, discovery.to_dict())
    return ExitCode.OK


def cmd_run(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill

    drill = Drill(_need_command(args), drill_options(args))
    result = drill.run_case(args.schedule)
    print(render_case(result))
    _write_json(args.json, {"cases": [result.to_dict()], "summary": _summary([result])})
    return ExitCode.OK if result.ok else ExitCode.VIOLATION


def _summary(cases: Sequence[Any]) -> dict[str, Any]:
    from killdrill.report import summarize_cases

    return summarize_cases(cases)


def cmd_drill(args: argparse.Namespace) -> int:
    from killdrill.drill import Drill

    drill = Drill(_need_command(args), drill_options(args))
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
    print(render_drill(result))
    _write_json(args.json, result.to_dict())
    return ExitCode.OK if result.ok else ExitCode.VIOLATION


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
    p.add_argument("--workers", type=positive_int, default=1, help="cases run at once (1)")
    p.add_argument("--json", metavar="FILE", help="write the machine-readable report")
    p.set_defaults(func=cmd_drill)

    # commands defined next to what they drive register themselves; chaos shares the drill flags
    flags = DrillFlags(
        add=add_drill_options, options=drill_options, command=_need_command, positive_int=positive_int
    )
    chaos_cli.add_parser(sub, flags)
    report_cli.add_parser(sub)
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


def main(argv: Sequence[str] | None = None) -> int:
    own, command = _split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not command:
        forgot = _forgot_separator(parser, own)
        if forgot:
            print(f"killdrill: error: {forgot}", file=sys.stderr)
            return ExitCode.ERROR
    args = parser.parse_args(own)
    args.command = command
    try:
        with signals_raise(only_default=True), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = _print_warning
            return int(args.func(args))
    except UsageError as exc:
        print(f"killdrill: error: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    except HarnessError as exc:  # an unusable ledger (LedgerError) too, said in one line
        text = str(exc)
        first, _, rest = text.partition("\n")
        print(f"killdrill: error: {first}", file=sys.stderr)
        if rest:
            print(rest, file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:  # SIGINT while someone else's handler was installed
        print("killdrill: interrupted (SIGINT); every agent process was killed", file=sys.stderr)
        return _interrupted(128 + signal.SIGINT, as_program=argv is None)
    except Interrupted as stop:
        if not stop.reported:
            how = "interrupted" if stop.signum == signal.SIGINT else "terminated"
            print(f"killdrill: {how} ({stop.name}); every agent process was killed", file=sys.stderr)
        # a chaos job (it reports its own stop) stopped every worker and attempt itself; its fork
        # templates exit when their socket closes, so it skips the exit handlers' graceful wait
        return _interrupted(stop.code, as_program=argv is None, exit_handlers=not stop.reported)


def _interrupted(code: int, *, as_program: bool, exit_handlers: bool = True) -> int:
    """As the program, exit now: the launchers' exit handlers run (unless ``exit_handlers`` is
    False), the interpreter's teardown (seconds on a loaded machine, nothing left to save) does not."""
    if not as_program:
        return code
    import atexit
    import os

    if exit_handlers:
        atexit._run_exitfuncs()  # stops the launcher templates (nothing of any attempt is left)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
