"""``killdrill clean``: remove what drills left on this machine, now.

Every run sweeps what harnesses that are gone left behind (``drill.sweep``) in the background;
this command does it in the foreground, says what it removed, and also clears the kept evidence
(made roots kept for failed cases, bounded at ``ownership.KEEP_LIMIT`` anyway) unless
``--keep-evidence``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from killdrill import ownership
from killdrill.drill.sweep import prune_kept, sweep

__all__ = ["add_parser"]


def _cmd_clean(args: argparse.Namespace) -> int:
    said = sweep()
    if not args.keep_evidence:
        said += prune_kept(0)
    for line in said:
        print(f"removed {line}")
    kept = ownership.kept()
    print(
        f"{len(said)} removed; {len(kept)} kept folder(s) of failed cases left"
        if kept
        else f"{len(said)} removed; nothing of killdrill's is left here but what running drills own"
    )
    for entry in kept:
        size = sum(f.stat().st_size for f in Path(entry["path"]).rglob("*") if f.is_file())
        print(f"  {entry['path']} ({size / 1e6:.1f} MB)", file=sys.stdout)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "clean",
        help="remove what drills left on this machine (dead harnesses' folders, broker namespaces, "
        "schemas; kept evidence of failed cases)",
        description="Remove what harnesses that are gone left behind (their workdir roots, Redis key "
        "prefixes, RabbitMQ vhosts, PostgreSQL schemas, runtime servers' databases), and the folders kept as "
        "evidence of failed cases (every run keeps the newest "
        f"{ownership.KEEP_LIMIT} of those anyway). What a running drill owns is never touched.",
    )
    p.add_argument(
        "--keep-evidence", action="store_true", help="leave the kept folders of failed cases in place"
    )
    p.set_defaults(func=_cmd_clean)
