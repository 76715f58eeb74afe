"""The option tables: every front end derives its spelling of an option from them.

A row describes one option: its value kind (the one parser of that kind of value, with its
bound), default, help, CLI flag, pytest ini key, whether it changes what a clean run does (the
plugin's discovery cache key) and whether it belongs in a case's reproduction line.  Here:
``OPTIONS`` (``DrillOptions``: the CLI's supervisor flags, the plugin's ini keys and marker
keywords), the rule engine and the value kinds (:mod:`killdrill.options.kinds`); each front end
keeps its own rows beside it (``killdrill.chaos.options.CHAOS_OPTIONS``, ``killdrill chaos``'s
flags; ``killdrill.pytest_plugin._flags.PLUGIN_OPTIONS``, the ``--killdrill-*`` pytest flags), and
an integration's rows are in its record (``Integration.options``, checked by the drill; their
values: ``DrillOptions.integration_options``).  An option added to a table appears everywhere at
once and cannot drift.

Checked once, here: building a ``DrillOptions`` or ``ChaosOptions`` parses every field with its
row's kind and then applies the table's ``Rule``s (options that go together), and each message
names an option the way the caller spelled it (``Spelling``): ``--model-variance`` on the
command line, ``killdrill_model_variance`` in a pytest ini file, ``model_variance=`` for a
marker, the fixture or the Python API.  The rules that need the agent's command (``--launcher
fork`` needs a python one) are checked by the drill, worded by the same ``Rule``.

Standard library only (the bottom layer): no argparse here, no pytest, no file-system I/O.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from killdrill import envvars
from killdrill.options.db_effects import DB_EFFECT_ROWS
from killdrill.options.fakes import FAKE_ROWS
from killdrill.options.kinds import (
    Answers,
    Choice,
    Command,
    Duration,
    Flag,
    Kind,
    Names,
    Number,
    Option,
    OptionError,
    Pair,
    Pairs,
    Repeated,
    Some,
    Spelled,
    Spelling,
    Text,
    _join_identity,
    _join_pair,
    _split_env,
    _split_identity,
)
from killdrill.options.proxies import PROXY_ROWS
from killdrill.options.rules import Rule, _spelling
from killdrill.options.services import SERVICE_ROWS, SERVICE_RULES

__all__ = [
    "OPTIONS",
    "Answers",
    "Choice",
    "Command",
    "DrillOptions",
    "Duration",
    "Flag",
    "Kind",
    "Names",
    "Number",
    "Option",
    "OptionError",
    "Pair",
    "Pairs",
    "Repeated",
    "Rule",
    "Some",
    "Spelled",
    "Spelling",
    "Text",
    "by_field",
    "check_values",
    "convert",
    "from_fields",
    "override",
    "spelled_fields",
]


@dataclass(frozen=True)
class DrillOptions:
    """How cases are run.  Every field has a row in ``OPTIONS``: a CLI flag, a pytest ini key
    and a marker keyword of the field's name (``tests/test_drill_options.py`` checks it)."""

    root: str | os.PathLike[str] | None = None  # where workdirs go (default: a new temp dir)
    timeout: float = 60.0  # seconds per attempt; a hang is a verdict
    max_attempts: int | None = None  # default: kills in the schedule + 3
    identity: Mapping[str, Sequence[str]] = field(default_factory=dict)  # "payments.charge": [fields]
    http_fakes: bool = False
    smtp_fake: bool = False  # an SMTP server on 127.0.0.1 (KILLDRILL_SMTP): messages are mailbox.send
    hooks: Mapping[str, str] = field(default_factory=dict)  # /hooks route pattern -> "keyed" | "naive"
    hook_key_header: str = "Idempotency-Key"  # where the /hooks sink reads a request's key
    between: Sequence[str] | None = None  # command run between attempts (reconciliation)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    keep: bool = False  # keep passing workdirs too
    signal: str = "KILL"  # "TERM": drain drills (SIGTERM, SIGKILL after `grace`)
    grace: float = 5.0
    integrations: tuple[str, ...] = ()  # their names (killdrill.integrations)
    discovery_runs: int = 2  # two clean runs tell legitimately volatile fields apart
    ledger_url: str | None = None  # a shared SQLAlchemy URL instead of a SQLite file per case
    resumers: int = 1  # concurrent resumers after the first kill
    barrier: str | None = None  # with resumers: only this point is a barrier (default: all)
    workers: int = 1  # cases run in parallel by run_all
    launcher: str = "spawn"  # "fork": attempts forked from a warm template (killdrill.process.forks)
    preload: tuple[str, ...] = ()  # modules the fork template imports once (beyond killdrill's own)
    checks: tuple[str, ...] = ()  # opt-in verdict checks, e.g. ("compensation_order",)
    model_script: str | None = None  # serve a scripted model on the HTTP fakes (fakes/model_script.py)
    model_variance: int | None = None  # a seed: each attempt gets other wording and $vary values
    pass_env: tuple[str, ...] = ()  # proxies, vendor keys passed on (killdrill.isolation)
    resume_with: Sequence[str] | None = None  # the upgrade: attempts 2..k run this command (faults.fleet)
    serve: Mapping[str, Sequence[str]] = field(default_factory=dict)  # service name -> its command
    ready: Mapping[str, str] = field(default_factory=dict)  # service name -> tcp:PORT|http://URL|log:TEXT
    replicas: Mapping[str, int] = field(default_factory=dict)  # service name -> copies
    after: Mapping[str, Sequence[str]] = field(
        default_factory=dict
    )  # service -> the services it starts after
    restart_delay: float = 0.0  # seconds before a killed service is started again
    answer: tuple[str, ...] = ()  # the scripted human: answers to the run's interrupts, in order
    effect_table: Mapping[str, Any] = field(default_factory=dict)  # name -> (columns, query): db rows
    effect_db: str | None = None  # the URL of the agent's own database (killdrill.drill.db_effects)
    existing: str | None = None  # objects every run's fakes hold before it starts (fakes/existing.py)
    power_loss_paths: tuple[str, ...] = ()  # powerloss: folders lossy besides the workdir (faults.powerloss)
    proxy: Mapping[str, str] = field(default_factory=dict)  # name -> SCHEME://HOST:PORT (faults.proxy)
    # The enabled integrations' own options by field (their records' rows, checked by the drill).
    integration_options: Mapping[str, Any] = field(default_factory=dict)
    # How the caller named the fields (for messages only: not an option, not compared).
    spelled: Spelled = field(default=Spelling.KEYWORD, compare=False, repr=False)

    def __post_init__(self) -> None:
        """The one check of a drill's options: every field through its row's kind (the value
        kept is what the kind makes of it: text from a flag or an ini file and a Python value
        land on the same value), then the rules tying two options.  ``max_attempts=-1`` is a
        one-line OptionError here, whichever front end gave it."""
        check_values(self, OPTIONS, DRILL_RULES, self.spelled)
        object.__setattr__(self, "integration_options", dict(self.integration_options))
        if shadowed := sorted(set(self.integration_options) & set(_BY_FIELD)):
            raise OptionError(f"integration_options: {shadowed[0]}= is a drill option, not an integration's")


# ---- the table -----------------------------------------------------------------------------------


_SECONDS = Number(float, 1e-3, "a number of seconds > 0")
_SECONDS_OR_ZERO = Number(float, 0.0, "a number of seconds >= 0")
_COUNT = Number(int, 1, "a whole number >= 1")

OPTIONS: tuple[Option, ...] = (
    Option("timeout", _SECONDS, 60.0, "seconds per attempt; longer is a hang (60)", "--timeout"),
    Option(
        "max_attempts",
        _COUNT,
        None,
        "attempts per case (default: kills in the schedule + 3)",
        "--max-attempts",
    ),
    *FAKE_ROWS,
    Option(
        "identity",
        Pairs(_split_identity, _join_identity, "PROVIDER.OP=F1,F2"),
        {},
        "fields that identify one logical effect of an op (default: the whole stable payload)",
        "--identity",
    ),
    Option("between", Command(), None, "command run between attempts (reconciliation)", "--between"),
    Option(
        "resume_with",
        Command(),
        None,
        "the upgrade: attempts 2..k run this command, judged against the first command's clean run"
        " (also: ... -- OLD CMD --resume-with -- NEW CMD)",
        "--resume-with",
    ),
    *SERVICE_ROWS,
    *PROXY_ROWS,
    *DB_EFFECT_ROWS,
    Option(
        "pass_env",
        Names(metavar="NAME"),
        (),
        "pass this variable (a proxy, a vendor's key: OPENAI_API_KEY, STRIPE_SECRET_KEY, HTTPS_PROXY, ...) "
        "from the harness's environment to the agent: withheld by default, so a drill reaches nothing "
        "but the loopback",
        "--pass-env",
        discovery=True,
    ),
    Option(
        "env",
        Pairs(_split_env, _join_pair, "K=V"),
        {},
        "extra environment for the agent",
        "--env",
        discovery=True,
    ),
    Option(
        "cwd",
        Text(paths=True),
        None,
        "working directory of the agent (default: the current one)",
        "--cwd",
        discovery=True,
    ),
    Option(
        "root",
        Text(paths=True),
        None,
        "where case workdirs go (default: a new temporary folder)",
        "--root",
        reproduce=False,
    ),
    Option(
        "keep",
        Flag(),
        False,
        "keep passing workdirs too (failing ones always are)",
        "--keep",
        reproduce=False,
    ),
    Option(
        "signal", Choice(("KILL", "TERM")), "KILL", "TERM: drain drill (SIGKILL after --grace)", "--signal"
    ),
    Option("grace", _SECONDS_OR_ZERO, 5.0, "seconds between SIGTERM and SIGKILL (5)", "--grace"),
    Option(
        "integrations",
        Names(),
        (),
        "activate an integration by name (repeatable)",
        "--integration",
        discovery=True,
    ),
    Option(
        "discovery_runs",
        _COUNT,
        2,
        "clean runs in discovery (2 name volatile fields)",
        "--discovery-runs",
        discovery=True,
    ),
    Option(
        "ledger_url",
        Text(paths=True),
        None,
        "a shared SQLAlchemy URL for the ledger (default: SQLite per case)",
        "--ledger-url",
        discovery=True,
        reproduce=False,  # may hold a password; the reproduction uses its own ledger
    ),
    Option(
        "power_loss_paths",
        Names(metavar="PATH"),
        (),
        "with a powerloss: fault, this folder too loses what was not synced, as the workdir does (an "
        "existing directory; {workdir} and {thread} filled; repeat for more)",
        "--power-loss-path",
    ),
    Option("resumers", _COUNT, 1, "concurrent resumers after the first kill", "--resumers"),
    Option(
        "barrier",
        Text(metavar="POINT"),
        None,
        "with --resumers: the only point that is a barrier",
        "--barrier",
    ),
    Option("workers", _COUNT, 1, "cases run at once (1)", "--workers", reproduce=False),
    Option(
        "launcher",
        Choice(("spawn", "fork")),
        "spawn",
        "fork: attempts forked from a template that imported the agent's modules once (python agents)",
        "--launcher",
    ),
    Option(
        "preload", Names(metavar="MODULE"), (), "with --launcher fork: modules imported once", "--preload"
    ),
    Option(
        "checks",
        Names(metavar="CHECK"),
        (),
        "opt-in verdict check, e.g. compensation_order (undo operations in reverse order of their actions)",
        "--check",
    ),
    Option(
        "model_script",
        Text(metavar="FILE", paths=True),
        None,
        "answer the agent's model calls (OpenAI /v1/chat/completions and /v1/responses, Anthropic "
        "/v1/messages) from this script (no --http-fakes needed); every drill points OPENAI_BASE_URL and "
        "ANTHROPIC_BASE_URL at "
        "the model fake, and without a script a model call is answered 400",
        "--model-script",
        discovery=True,
    ),
    Option(
        "model_variance",
        Number(int, 0, "a seed, a whole number >= 0"),
        None,
        "each attempt gets other wording and $vary values (seeded; default seed 0; the model's ids "
        "differ on every answer regardless)",
        "--model-variance",
        discovery=True,
        flag_const=0,
    ),
    Option(
        "answer",
        Answers(),
        (),
        "the scripted human: answer the run's next pending interrupt/approval with VALUE (JSON when "
        "it parses, else text), through the integration; repeat it for the next ones, in order",
        "--answer",
        discovery=True,
    ),
)

_BY_FIELD = {o.field: o for o in OPTIONS}

# ---- rules: options that go together -------------------------------------------------------------


def _names(env: Mapping[str, str], *variables: str) -> bool:
    return any("{" + v + "}" in value for value in env.values() for v in variables)


DRILL_RULES: tuple[Rule, ...] = (
    Rule(
        "{model_variance} needs {model_script} (the model fake's script)",
        lambda o: o["model_variance"] is None or o["model_script"] is not None,
    ),
    Rule(
        f"{{env}} names {{{{{envvars.FAKES_URL}}}}},"
        " set for the agent only with {http_fakes} or {model_script}",
        lambda o: (
            o["http_fakes"]
            or o["model_script"] is not None
            or not _names(o["env"], envvars.FAKES_URL, envvars.FAKES_SECRET)
        ),
    ),
    Rule(
        f"{{env}} names {{{{{envvars.SMTP}}}}}, set for the agent only with {{smtp_fake}}",
        lambda o: o["smtp_fake"] or not _names(o["env"], envvars.SMTP),
    ),
    Rule(
        "{effect_table} needs {effect_db} (the URL of the database the agent writes)",
        lambda o: not o["effect_table"] or o["effect_db"] is not None,
    ),
    Rule(
        "{effect_db} needs {effect_table} (the tables whose rows are effects)",
        lambda o: o["effect_db"] is None or bool(o["effect_table"]),
    ),
    *SERVICE_RULES,
)
"""The rules tying two drill options, checked with every DrillOptions."""

FORK_NEEDS_PYTHON = Rule("{launcher:v} needs a `python -m MODULE ...` or `python SCRIPT ...` command")
FORK_NEEDS_PYTHON_RESUME = Rule("{launcher:v} needs the {resume_with} command to be a python one too")
ANSWER_NEEDS_INTEGRATION = Rule(
    "{answer} needs an integration that answers interrupts through its framework: {integrations} {can}"
)
ANSWER_CANNOT = Rule(
    "{answer}: the {name} integration cannot answer its framework's pending interrupts or approvals "
    "({can} can); answer them in the agent's own driver, or drill without {answer}"
)
NO_ANSWER = Rule(
    "the clean run of {command} stopped at an interrupt with no answer ({interrupt}): give the "
    "scripted human's answers, in order, with {answer}"
)
UNKNOWN_CHECK = Rule("unknown check {name!r} in {checks}: expected one of {known}")
"""Rules the drill checks (they need its command or the check registry), worded here."""


def check_values(
    obj: Any, rows: Sequence[Option], rules: Iterable[Rule], spelled: Spelled = Spelling.KEYWORD
) -> None:
    """Parse every field of the frozen dataclass ``obj`` with its row's kind and keep what the
    kind makes of it, then apply ``rules``: the one check of an options value.  ``None`` is
    "not given" and kept.  A mistake is a one-line OptionError naming the option as spelled."""
    for row in rows:
        if row.into:
            continue  # a flag only: its fields have rows of their own
        value = getattr(obj, row.field)
        if value is None:
            continue
        try:
            parsed = row.kind.from_value(value)
        except OptionError as exc:
            raise OptionError(f"{row.spell(_spelling(spelled, row.field, None))}: {exc}") from None
        object.__setattr__(obj, row.field, parsed)
    values = {row.field: getattr(obj, row.field) for row in rows if not row.into}
    for rule in rules:
        rule.check(values, spelled, rows)


def spelled_fields(obj: Any, rows: Iterable[Option]) -> dict[str, Spelling]:
    """How ``obj`` (an options value with a ``spelled``) names each of ``rows``' fields."""
    return {r.field: _spelling(obj.spelled, r.field, None) for r in rows}


def override(options: DrillOptions, overrides: Mapping[str, Any]) -> DrillOptions:
    """``options`` with ``overrides`` given as Python keywords (``Drill(command, options, **overrides)``):
    a new value, checked once, the overridden fields named as keywords in its messages."""
    if not overrides:
        return options
    spelled = {**spelled_fields(options, OPTIONS), **dict.fromkeys(overrides, Spelling.KEYWORD)}
    core, theirs = _split(overrides)
    theirs = {**options.integration_options, **theirs}
    return dataclasses.replace(options, **core, integration_options=theirs, spelled=spelled)


def from_fields(values: Mapping[str, Any], spelled: Spelled = Spelling.KEYWORD) -> DrillOptions:
    """The DrillOptions of flat fields, as a front end gathers them (``--broker`` beside
    ``--timeout``): a name that is no drill field is an integration's option."""
    core, theirs = _split(values)
    return DrillOptions(**core, integration_options=theirs, spelled=spelled)


def _split(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    core = {k: v for k, v in values.items() if k in _BY_FIELD}
    theirs = {k: v for k, v in values.items() if k not in core and k != "integration_options"}
    return core, {**values.get("integration_options", {}), **theirs}


def by_field(name: str) -> Option:
    """The row of a DrillOptions field (KeyError for a name that is not one)."""
    return _BY_FIELD[name]


def convert(name: str | Option, value: Any, where: str) -> Any:
    """A marker keyword, call keyword or ini value of field ``name`` (or of an integration's row).

    ``where`` names the source in the one-line error (e.g. ``ini killdrill_timeout``).
    """
    row = name if isinstance(name, Option) else by_field(name)
    try:
        if value is None:
            if row.default is None:
                return None
            raise OptionError(f"expected a value, got {value!r}")
        return row.kind.from_value(value)
    except OptionError as exc:
        raise OptionError(f"{where}: {exc}") from None


def discovery_fields() -> tuple[str, ...]:
    """The fields that change what a clean run does (the discovery cache key)."""
    return tuple(o.field for o in OPTIONS if o.discovery)
