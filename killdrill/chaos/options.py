"""``killdrill chaos``'s option rows (``ChaosOptions``) and the rules tying them, beside the job
they configure; the rule engine and the value kinds are the core's (:mod:`killdrill.options`)."""

from __future__ import annotations

from typing import Any

from killdrill.faults.fleet import CHAOS_FAULTS
from killdrill.options import _COUNT, Option, OptionError, Rule
from killdrill.options.kinds import Duration, Flag, Kind, Number, Pair, Some, Text

__all__ = ["CHAOS_OPTIONS", "CHAOS_RULES", "CHAOS_UPGRADE", "parse_faults"]


def _chaos(field: str, kind: Kind, default: Any, help: str, flag: str | None = "", **kw: Any) -> Option:
    return Option(field, kind, default, help, flag, ini_key=False, reproduce=False, **kw)


CHAOS_OPTIONS: tuple[Option, ...] = (
    _chaos("runs", _COUNT, 100, "random runs in total over all shards (default 100; none with --budget)"),
    _chaos(
        "budget_s",
        Duration(),
        None,
        "stop starting runs this long after discovery, e.g. 20m (runs in flight finish)",
        "--budget",
    ),
    _chaos(
        "faults",
        Some(CHAOS_FAULTS, always=("kill",), what="fault"),
        ("kill",),
        "faults drawn: kill (always), pause (the zombie), upgrade (resumes run --resume-with), "
        "net (drop:/reset: toward the HTTP fakes and --proxy, one run in two), deps (restart= a --serve"
        " service, cut=/rst= a --proxy, at a catalogue point, one run in two), power (a kill turned into"
        " a power loss, one run in two: needs FUSE)",
    ),
    _chaos(
        "seed", Number(int, None, "a whole number"), None, "seed of the schedules (default: random, printed)"
    ),
    _chaos(
        "kills",
        Pair("..", "MIN..MAX", "1..3", single=True),
        (1, 3),
        "kills per run (1..3)",
        into=("min_kills", "max_kills"),
    ),
    _chaos("min_kills", _COUNT, 1, "fewest kills per run", None),
    _chaos("max_kills", _COUNT, 3, "most kills per run", None),
    _chaos("shard", Pair("/", "K/N", "2/4"), (1, 1), "run only the K-th of N disjoint parts"),
    _chaos("processes", _COUNT, 1, "worker processes, each running one case at a time (default: cores)"),
    _chaos(
        "report_dir",
        Text(metavar="DIR", paths=True),
        None,
        "write chaos.json, plans.jsonl, report.json, junit.xml, report.html",
        "--report",
    ),
    _chaos(
        "regressions",
        Text(metavar="PATH", paths=True),
        None,
        "append each distinct shrunk failure to this corpus",
    ),
    _chaos("shrink", Flag(), True, "report failures as found, unshrunk", "--no-shrink"),
    _chaos("shrink_runs", _COUNT, 24, "cases each shrink may run (24)"),
    _chaos("max_failures", _COUNT, None, "stop starting runs after this many violated runs"),
    _chaos("progress", Flag(), None, "a progress bar (default: on a terminal)", None),
)
"""``ChaosOptions`` and ``killdrill chaos``'s flags (``--kills`` sets min_kills and max_kills;
``--no-shrink`` turns ``shrink`` off).  No ini keys: chaos is a command."""


CHAOS_RULES: tuple[Rule, ...] = (
    Rule("{min_kills} is more than {max_kills}", lambda o: o["min_kills"] <= o["max_kills"]),
)
"""The rules tying two chaos options, checked with every ChaosOptions."""

CHAOS_UPGRADE = Rule(
    "{faults} ...,upgrade and {resume_with} go together (the upgrade's command)",
    lambda o: ("upgrade" in o["faults"]) == bool(o["resume_with"]),
)
"""A chaos option tied to a drill option: checked where both are known (``run_chaos``)."""


def parse_faults(text: str) -> tuple[str, ...]:
    """``kill,pause,upgrade,net,power,deps`` (``--faults``): kills are always drawn."""
    row = next(r for r in CHAOS_OPTIONS if r.field == "faults")
    try:
        return tuple(row.kind.from_text(text))
    except OptionError as exc:
        raise OptionError(f"{row.flag} {text!r}: {exc}") from None
