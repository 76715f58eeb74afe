"""The one table of drill options: every front end derives its spelling of an option from it.

A row describes one ``DrillOptions`` field: its value kind (the one parser of that kind of
value, with its bound), default, help, CLI flag, pytest ini key, whether it changes what a
clean run does (the plugin's discovery cache key) and whether it belongs in a case's
reproduction line.  The CLI flags (``killdrill.cli.commands``), the plugin's ini keys and marker
keywords, ``Drill.reproduce_line`` and the discovery cache key are all read from ``OPTIONS``,
so an option added here appears everywhere at once and cannot drift.

Standard library only (the bottom layer): no argparse here, no pytest.

Whitespace, one rule per value kind: names (keys, provider ops, identity fields, hook patterns,
integration/module names) are stripped; an ``env`` value is kept exactly as written.
"""

from __future__ import annotations

import abc
import math
import os
import shlex
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from killdrill.errors import UsageError

__all__ = [
    "OPTIONS",
    "DrillOptions",
    "Option",
    "OptionError",
    "by_field",
    "check_output_dir",
    "check_output_file",
    "convert",
    "reproduce_args",
]


class OptionError(UsageError):
    """A drill option's value is wrong; the text says which value and what was expected."""


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
    integrations: tuple[str, ...] = ()  # e.g. ("langgraph",)
    discovery_runs: int = 2  # two clean runs tell legitimately volatile fields apart
    ledger_url: str | None = None  # a shared SQLAlchemy URL instead of a SQLite file per case
    resumers: int = 1  # concurrent resumers after the first kill
    barrier: str | None = None  # with resumers: only this point is a barrier (default: all)
    workers: int = 1  # cases run in parallel by run_all
    launcher: str = "spawn"  # "fork": attempts forked from a warm template (killdrill.process.launcher)
    preload: tuple[str, ...] = ()  # modules the fork template imports once (beyond killdrill's own)
    checks: tuple[str, ...] = ()  # opt-in verdict checks, e.g. ("compensation_order",)
    model_script: str | None = None  # serve a scripted model on the HTTP fakes (fakes/model_script.py)
    model_variance: int | None = None  # a seed: each attempt gets other wording, tool-call ids, $vary values
    resume_with: Sequence[str] | None = None  # the upgrade: attempts 2..k run this command (faults.fleet)

    def __post_init__(self) -> None:
        """The Python API meets the same bounds as the flags and ini keys (``max_attempts=-1`` is
        a one-line OptionError here too, not a drill that runs with it); values are kept as given."""
        for row in OPTIONS:
            value = getattr(self, row.field)
            if value is None or _same(value, row.default):
                continue
            try:
                row.kind.from_value(value)
            except OptionError as exc:
                raise OptionError(f"DrillOptions {row.field}: {exc}") from None


# ---- value kinds: one parser each ----------------------------------------------------------------

IniType = Literal["string", "args", "linelist", "bool"]  # pytest addini types the kinds use


class Kind(abc.ABC):
    """How one kind of value is read from text (a flag's argument, an ini value, one ini line),
    accepted from Python (a marker keyword), and written back as flag arguments."""

    repeated = False  # the flag may be given many times; the ini value is a list
    ini_type: IniType = "string"
    metavar: str | None = None

    @abc.abstractmethod
    def from_text(self, text: str) -> Any:
        """The value of one flag argument or ini value (a one-line UsageError when it is bad)."""

    def from_value(self, value: Any) -> Any:
        """A marker keyword or ``Drill(**overrides)`` value: text goes through ``from_text``."""
        return self.from_text(value) if isinstance(value, str) else value

    def to_texts(self, value: Any) -> list[str]:
        """The flag arguments that give ``value`` back (one per repetition)."""
        return [str(value)]


@dataclass(frozen=True)
class Number(Kind):
    """A finite int or float, at least ``minimum``; ``None`` allowed when the default is None."""

    type: type[int] | type[float]
    minimum: float | None
    what: str

    def from_text(self, text: str) -> Any:
        try:
            value = self.type(text.strip())
        except ValueError:
            raise OptionError(f"expected {self.what}, got {text!r}") from None
        return self._check(value, text)

    def from_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.from_text(value)
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            raise OptionError(f"expected {self.what}, got {value!r}")
        if self.type is int and not float(value).is_integer():
            raise OptionError(f"expected {self.what}, got {value!r}")
        return self._check(self.type(value), value)

    def _check(self, value: float, given: Any) -> Any:
        if not math.isfinite(value) or (self.minimum is not None and value < self.minimum):
            raise OptionError(f"expected {self.what}, got {given!r}")
        return value

    def to_texts(self, value: Any) -> list[str]:
        return [f"{value:g}" if self.type is float else str(value)]


class Flag(Kind):
    """On or off: a CLI switch, an ini bool, a marker ``True``/``False``."""

    ini_type: IniType = "bool"
    _WORDS = {
        "1": True,
        "true": True,
        "yes": True,
        "on": True,
        "0": False,
        "false": False,
        "no": False,
        "off": False,
    }

    def from_text(self, text: str) -> bool:
        try:
            return self._WORDS[text.strip().lower()]
        except KeyError:
            raise OptionError(f"expected true or false, got {text!r}") from None

    def from_value(self, value: Any) -> bool:
        if isinstance(value, str):
            return self.from_text(value)
        if not isinstance(value, bool):
            raise OptionError(f"expected True or False, got {value!r}")
        return value

    def to_texts(self, value: Any) -> list[str]:
        return []


@dataclass(frozen=True)
class Text(Kind):
    """Free text (a path, a URL, a header, a point), stripped; never empty."""

    metavar: str | None = None
    paths: bool = False  # a path: an os.PathLike is accepted as is

    def from_text(self, text: str) -> str:
        if not text.strip():
            raise OptionError("expected a value, got an empty one")
        return text.strip()

    def from_value(self, value: Any) -> Any:
        if self.paths and isinstance(value, os.PathLike):
            return value
        if not isinstance(value, str):
            raise OptionError(f"expected a string, got {value!r}")
        return self.from_text(value)

    def to_texts(self, value: Any) -> list[str]:
        return [os.fspath(value)]


@dataclass(frozen=True)
class Choice(Kind):
    """One of a few words, matched without regard to case."""

    choices: tuple[str, ...]

    def from_text(self, text: str) -> str:
        for choice in self.choices:
            if text.strip().lower() == choice.lower():
                return choice
        raise OptionError(f"expected one of {', '.join(self.choices)}, got {text!r}")

    def from_value(self, value: Any) -> str:
        if not isinstance(value, str):
            raise OptionError(f"expected one of {', '.join(self.choices)}, got {value!r}")
        return self.from_text(value)


class Command(Kind):
    """A command: text is split like a shell would; a list is taken as the argv."""

    metavar = "CMD"

    def from_text(self, text: str) -> list[str]:
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise OptionError(f"{text!r}: {exc}") from None
        if not argv:
            raise OptionError("expected a command, got an empty one")
        return argv

    def from_value(self, value: Any) -> list[str]:
        if isinstance(value, str):
            return self.from_text(value)
        if not isinstance(value, list | tuple) or not value or not all(isinstance(a, str) for a in value):
            raise OptionError(f"expected a command (a string or a list of strings), got {value!r}")
        return list(value)

    def to_texts(self, value: Any) -> list[str]:
        return [shlex.join(value)]


Combined = TypeVar("Combined")


class Repeated(Kind, Generic[Combined]):
    """A flag given once per item; the ini value is one item per line (or per word)."""

    repeated = True

    @abc.abstractmethod
    def item(self, text: str) -> Any:
        """One item (one flag argument, one ini line)."""

    @abc.abstractmethod
    def combine(self, items: Iterable[Any]) -> Combined:
        """The option's value from all its items."""

    def from_text(self, text: str) -> Combined:
        return self.combine([self.item(text)])

    def from_items(self, texts: Iterable[str]) -> Combined:
        return self.combine(self.item(t) for t in texts)


@dataclass(frozen=True)
class Names(Repeated[tuple[str, ...]]):
    """Names (integrations, modules, checks): each stripped, no blanks inside, duplicates once."""

    metavar: str = "NAME"
    ini_type: IniType = "args"

    def item(self, text: str) -> str:
        name = text.strip()
        if not name or any(c.isspace() for c in name):
            raise OptionError(f"expected a name, got {text!r}")
        return name

    def combine(self, items: Iterable[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(items))

    def from_value(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            return self.from_items(value.split())
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise OptionError(f"expected a list of names, got {value!r}")
        return self.from_items(value)

    def to_texts(self, value: Any) -> list[str]:
        return list(value)


@dataclass(frozen=True)
class Pairs(Repeated[dict[str, Any]]):
    """``KEY=VALUE`` items into a mapping.  ``split`` splits one item (names stripped), ``join``
    writes one back; a marker may give the mapping itself."""

    split: Callable[[str], tuple[str, Any]]
    join: Callable[[str, Any], str]
    metavar: str = "KEY=VALUE"
    ini_type: IniType = "linelist"

    def item(self, text: str) -> tuple[str, Any]:
        return self.split(text)

    def combine(self, items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        return dict(items)

    def from_value(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str):
            return self.from_items([value])
        if isinstance(value, Mapping):
            if not all(isinstance(k, str) for k in value):
                raise OptionError(f"expected {self.metavar} entries, got {value!r}")
            return self.from_items(self.join(k, v) for k, v in value.items())
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return self.from_items(value)
        raise OptionError(f"expected {self.metavar} entries, got {value!r}")

    def to_texts(self, value: Any) -> list[str]:
        return [self.join(k, v) for k, v in sorted(value.items())]


def _split_identity(text: str) -> tuple[str, tuple[str, ...]]:
    op, sep, fields = text.partition("=")
    names = tuple(f.strip() for f in fields.split(",") if f.strip())
    op = op.strip()
    if not sep or "." not in op or not names or any(c.isspace() for c in op):
        raise OptionError(f"{text!r}: expected PROVIDER.OP=FIELD1,FIELD2")
    return op, names


def _join_identity(op: str, fields: Any) -> str:
    names = [fields] if isinstance(fields, str) else list(fields)
    return f"{op}={','.join(str(f) for f in names)}"


def _split_env(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or any(c.isspace() for c in name):
        raise OptionError(f"{text!r}: expected NAME=VALUE")
    return name, value


def _split_hook(text: str) -> tuple[str, str]:
    pattern, sep, mode = text.rpartition("=")
    pattern, mode = pattern.strip(), mode.strip()
    if not sep or not pattern or mode not in ("keyed", "naive"):
        raise OptionError(f"{text!r}: expected PATTERN=keyed or PATTERN=naive")
    return pattern, mode


def _join_pair(key: str, value: Any) -> str:
    return f"{key}={value}"


# ---- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One row: a DrillOptions field and every spelling of it."""

    field: str
    kind: Kind
    default: Any
    help: str
    flag: str  # the CLI flag, e.g. "--max-attempts"
    discovery: bool = False  # changes what a clean run does: part of the discovery cache key
    reproduce: bool = True  # written into a case's reproduction line when not the default
    flag_const: Any = None  # a value the flag takes when given without one (nargs="?")

    @property
    def ini(self) -> str:
        """The pytest ini key: the field's name under ``killdrill_``."""
        return f"killdrill_{self.field}"


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
    Option(
        "http_fakes",
        Flag(),
        False,
        "serve the fakes on 127.0.0.1 (KILLDRILL_FAKES_URL)",
        "--http-fakes",
        discovery=True,
    ),
    Option(
        "smtp_fake",
        Flag(),
        False,
        "an SMTP server on 127.0.0.1 (KILLDRILL_SMTP): mailbox.send",
        "--smtp-fake",
        discovery=True,
    ),
    Option(
        "hooks",
        Pairs(_split_hook, _join_pair, "PATTERN=keyed|naive"),
        {},
        "semantics of /hooks routes matching PATTERN (default: keyed iff the request has a key)",
        "--hook",
        discovery=True,
    ),
    Option(
        "hook_key_header",
        Text(),
        "Idempotency-Key",
        "header the /hooks sink reads a key from",
        "--hook-key-header",
        discovery=True,
    ),
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
        "activate an integration, e.g. langgraph",
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
        "serve a scripted model (OpenAI /v1/chat/completions, Anthropic /v1/messages) on the HTTP "
        "fakes; sets OPENAI_BASE_URL and ANTHROPIC_BASE_URL for the agent",
        "--model-script",
        discovery=True,
    ),
    Option(
        "model_variance",
        Number(int, 0, "a seed, a whole number >= 0"),
        None,
        "each attempt gets other wording, tool-call ids and $vary values (seeded; default seed 0)",
        "--model-variance",
        discovery=True,
        flag_const=0,
    ),
)

_BY_FIELD = {o.field: o for o in OPTIONS}


def by_field(name: str) -> Option:
    """The row of a DrillOptions field (KeyError for a name that is not one)."""
    return _BY_FIELD[name]


def convert(name: str, value: Any, where: str) -> Any:
    """A marker keyword, call keyword or ini value of field ``name`` as its DrillOptions value.

    ``where`` names the source in the one-line error (e.g. ``ini killdrill_timeout``).
    """
    row = by_field(name)
    try:
        if value is None:
            if row.default is None:
                return None
            raise OptionError(f"expected a value, got {value!r}")
        return row.kind.from_value(value)
    except OptionError as exc:
        raise OptionError(f"{where}: {exc}") from None


def reproduce_args(options: DrillOptions) -> list[str]:
    """The flags that give ``options`` back, in table order, defaults and unreproduced fields left out."""
    args: list[str] = []
    for row in OPTIONS:
        value = getattr(options, row.field)
        if not row.reproduce or _same(value, row.default):
            continue
        texts = row.kind.to_texts(value)
        if isinstance(row.kind, Flag):
            args.append(row.flag)
        else:
            for text in texts:
                args += [row.flag, text]
    return args


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, Mapping | tuple | list):
        return not value
    return bool(value == default)


def discovery_fields() -> tuple[str, ...]:
    """The fields that change what a clean run does (the discovery cache key)."""
    return tuple(o.field for o in OPTIONS if o.discovery)


# ---- output paths: checked before any case runs ----------------------------------------------


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
