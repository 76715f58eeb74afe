"""``killdrill conform``: the resume-contract table of the installed agent frameworks.

Exit codes: 0 the table was made (a violated property is a finding about a framework, not a
failure of the command); 2 bad usage, or a cell that could not be judged (``error``) when
``--strict``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from killdrill.errors import ExitCode, UsageError
from killdrill.registry import nearest
from killdrill.report.outputs import check_output_file

__all__ = ["add_parser"]


def _cmd_conform(args: argparse.Namespace) -> int:
    from killdrill.conform.frameworks import by_name, quick
    from killdrill.conform.frameworks import frameworks as table
    from killdrill.conform.properties import PROPERTIES, QUICK_PROPERTIES, Cell, conform
    from killdrill.conform.table import load_cells, merge
    from killdrill.integrations import canonical_names

    for path, flag in ((args.json, "--json"), (args.markdown, "--markdown")):
        check_output_file(path, flag)
    try:
        names = list(canonical_names(args.integration or ())) or (list(quick()) if args.quick else None)
        frameworks = by_name(names)
    except KeyError as exc:
        have = [f.name for f in table()]
        close = nearest(exc.args[0], have)
        hint = f"did you mean {close}? " if close else ""
        raise UsageError(f"--integration {exc.args[0]}: {hint}expected one of {', '.join(have)}") from None
    props = tuple(args.property) if args.property else (QUICK_PROPERTIES if args.quick else PROPERTIES)
    bad = [p for p in props if p not in PROPERTIES]
    if bad:
        raise UsageError(f"--property {bad[0]}: expected one of {', '.join(PROPERTIES)}")
    props = tuple(p for p in PROPERTIES if p in props)

    def progress(cell: Cell) -> None:
        took = f" ({cell.seconds:.0f}s)" if cell.seconds else ""
        print(f"  {cell.framework:<14} {cell.property:<22} {cell.status}{took}", file=sys.stderr, flush=True)

    if args.saved:  # render saved tables (one per venv), no drill
        cells: list[Cell] = []
        for path in args.saved:
            try:
                cells = merge(cells, load_cells(path)) if cells else load_cells(path)
            except (OSError, ValueError, KeyError) as exc:
                raise UsageError(f"--from {path}: {exc}") from None
        return _output(args, cells)
    fw_n, prop_n = len(frameworks), len(props)
    fws = "1 framework" if fw_n == 1 else f"{fw_n} frameworks"
    ps = "1 property" if prop_n == 1 else f"{prop_n} properties"
    print(f"killdrill conform: {fws} x {ps}", file=sys.stderr)
    if args.root:
        root = Path(args.root)
        root.mkdir(parents=True, exist_ok=True)
        cells = conform(frameworks, props, root, on_cell=progress, keep=args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="killdrill-conform-") as tmp:
            cells = conform(frameworks, props, Path(tmp), on_cell=progress)
    for path in args.merge:
        try:
            cells = merge(cells, load_cells(path))
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"--merge {path}: {exc}") from None
    return _output(args, cells)


def _output(args: argparse.Namespace, cells: list[Any]) -> int:
    from killdrill.conform.properties import ERROR
    from killdrill.conform.table import render_markdown, render_text, to_json
    from killdrill.report.drill import write_json

    print(render_text(cells), end="")
    if args.json:
        write_json(args.json, to_json(cells))
    if args.markdown:
        Path(args.markdown).write_text(render_markdown(cells))
    if args.strict and any(c.status == ERROR for c in cells):
        return ExitCode.ERROR
    return ExitCode.OK


def add_parser(sub: Any) -> None:
    """Register ``killdrill conform`` with the CLI (``killdrill.cli.commands`` calls it)."""
    p = sub.add_parser(
        "conform",
        help="the resume contract: six properties x the installed agent frameworks, by drilling probes",
        description="Drill a bundled probe agent per framework and property (ordinary drills) and print "
        "the table: holds / violated (evidence, reproduction) / n/a (why) / not installed (the extra).",
    )
    p.add_argument("--integration", action="append", metavar="NAME", help="only this framework (repeatable)")
    p.add_argument("--property", action="append", metavar="NAME", help="only this property (repeatable)")
    p.add_argument(
        "--quick", action="store_true", help="the fast subset CI runs (the probes marked quick; 2 properties)"
    )
    p.add_argument("--json", metavar="FILE", help="write the table as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the table as Markdown (the README's)")
    p.add_argument(
        "--merge",
        action="append",
        default=[],
        metavar="FILE",
        help="fill cells not installed here from another run's --json (a framework's own venv)",
    )
    p.add_argument(
        "--root", metavar="DIR", help="where the drills' workdirs go (default: a temporary folder)"
    )
    p.add_argument(
        "--keep", action="store_true", help="keep every case's workdir under --root (ledgers to read)"
    )
    p.add_argument("--strict", action="store_true", help="exit 2 if a cell could not be judged (error)")
    p.add_argument(
        "--from",
        dest="saved",
        action="append",
        default=[],
        metavar="FILE",
        help="render saved --json tables instead of drilling (several: joined, e.g. another venv's)",
    )
    p.set_defaults(func=_cmd_conform)
