"""The option tables: every front end derives its spelling of an option from them.

A row describes one option: its value kind (the one parser of that kind of value, with its
bound), default, help, CLI flag, pytest ini key, whether it changes what a clean run does (the
plugin's discovery cache key) and whether it belongs in a case's reproduction line.  Three
tables: ``OPTIONS`` (``DrillOptions``: the CLI's supervisor flags, the plugin's ini keys and
marker keywords), ``CHAOS_OPTIONS`` (``ChaosOptions``: ``killdrill chaos``'s flags) and
``PLUGIN_OPTIONS`` (the ``--killdrill-*`` pytest flags).  An option added here appears
everywhere at once and cannot drift.

Checked once, here: building a ``DrillOptions`` or ``ChaosOptions`` parses every field with its
row's kind and then applies the table's ``Rule``s (options that go together), and each message
names an option the way the caller spelled it (``Spelling``): ``--model-variance`` on the
command line, ``killdrill_model_variance`` in a pytest ini file, ``model_variance=`` for a
marker, the fixture or the Python API.  The rules that need the agent's command (``--launcher
fork`` needs a python one) are checked by the drill, worded by the same ``Rule``.

Standard library only (the bottom layer): no argparse here, no pytest.

Whitespace, one rule per value kind: names (keys, provider ops, identity fields, hook patterns,
integration/module names) are stripped; an ``env`` value is kept exactly as written.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import json
import math
import os
import re
import shlex
import string
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from killdrill.errors import UsageError

__all__ = [
    "CHAOS_OPTIONS",
    "OPTIONS",
    "PLUGIN_OPTIONS",
    "DrillOptions",
    "Option",
    "OptionError",
    "Rule",
    "Spelling",
    "by_field",
    "check_output_dir",
    "check_output_file",
    "check_values",
    "convert",
    "override",
    "reproduce_args",
    "reproduce_line",
    "spelled_fields",
]


class OptionError(UsageError):
    """An option's value is wrong, or two options do not go together; the text names the
    option(s) as the caller spelled them and says what was expected."""


class Spelling(enum.Enum):
    """How a caller names options, so a message can name them the same way."""

    FLAG = "flag"  # the command line: --max-attempts
    INI = "ini"  # a pytest ini file: killdrill_max_attempts
    KEYWORD = "keyword"  # Python: a marker, the fixture, DrillOptions/Drill: max_attempts=


Spelled = Spelling | Mapping[str, Spelling]
"""One spelling for every field, or field by field (the plugin's ini, marker and call layers)."""


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
    broker: str | None = None  # --integration celery: the broker each run is isolated on (default: Redis)
    discovery_runs: int = 2  # two clean runs tell legitimately volatile fields apart
    ledger_url: str | None = None  # a shared SQLAlchemy URL instead of a SQLite file per case
    resumers: int = 1  # concurrent resumers after the first kill
    barrier: str | None = None  # with resumers: only this point is a barrier (default: all)
    workers: int = 1  # cases run in parallel by run_all
    launcher: str = "spawn"  # "fork": attempts forked from a warm template (killdrill.process.launcher)
    preload: tuple[str, ...] = ()  # modules the fork template imports once (beyond killdrill's own)
    checks: tuple[str, ...] = ()  # opt-in verdict checks, e.g. ("compensation_order",)
    model_script: str | None = None  # serve a scripted model on the HTTP fakes (fakes/model_script.py)
    model_variance: int | None = None  # a seed: each attempt gets other wording and $vary values
    pass_env: tuple[str, ...] = ()  # model provider keys/endpoints passed to attempts (drill.env.WITHHELD)
    resume_with: Sequence[str] | None = None  # the upgrade: attempts 2..k run this command (faults.fleet)
    answer: tuple[str, ...] = ()  # the scripted human: answers to the run's interrupts, in order
    # How the caller named the fields (for messages only: not an option, not compared).
    spelled: Spelled = field(default=Spelling.KEYWORD, compare=False, repr=False)

    def __post_init__(self) -> None:
        """The one check of a drill's options: every field through its row's kind (the value
        kept is what the kind makes of it: text from a flag or an ini file and a Python value
        land on the same value), then the rules tying two options.  ``max_attempts=-1`` is a
        one-line OptionError here, whichever front end gave it."""
        check_values(self, OPTIONS, DRILL_RULES, self.spelled)


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
    metavar: str | None = None

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


@dataclass(frozen=True)
class Answers(Repeated[tuple[str, ...]]):
    """Answers, in order, repeats kept, each text as given (JSON when it parses as JSON, else
    the text: read by the agent, ``killdrill.integrations._answers``); from Python, a value that
    is not text is written as its JSON."""

    metavar: str = "VALUE"
    ini_type: IniType = "linelist"

    def item(self, text: str) -> str:
        return text

    def combine(self, items: Iterable[str]) -> tuple[str, ...]:
        return tuple(items)

    def from_value(self, value: Any) -> tuple[str, ...]:
        items = list(value) if isinstance(value, list | tuple) else [value]
        try:
            return self.from_items(v if isinstance(v, str) else json.dumps(v) for v in items)
        except (TypeError, ValueError):
            raise OptionError(f"expected answers (text, or values JSON can write), got {value!r}") from None

    def to_texts(self, value: Any) -> list[str]:
        return list(value)


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


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")


class Duration(Kind):
    """A length of time: ``90s``, ``20m``, ``1.5h`` or plain seconds (a number from Python)."""

    metavar = "TIME"

    def from_text(self, text: str) -> float:
        m = _DURATION.match(text.strip())
        if not m:
            raise OptionError(f"expected a time such as 90s, 20m or 1h, got {text!r}")
        return float(m[1]) * {"s": 1, "m": 60, "h": 3600, None: 1}[m[2]]

    def from_value(self, value: Any) -> float:
        if isinstance(value, str):
            return self.from_text(value)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            raise OptionError(f"expected a time in seconds >= 0, got {value!r}")
        return float(value)

    def to_texts(self, value: Any) -> list[str]:
        return [f"{value:g}s"]


@dataclass(frozen=True)
class Pair(Kind):
    """Two whole numbers ``1 <= first <= second``: ``MIN..MAX`` (``sep`` ".."; one number is
    both) or ``K/N`` (``sep`` "/", both required)."""

    sep: str
    metavar: str | None = None
    example: str = ""
    single: bool = False  # one number alone means (N, N)

    def from_text(self, text: str) -> tuple[int, int]:
        a, sep, b = text.strip().partition(self.sep)
        try:
            pair = (int(a), int(b if sep else a))
        except ValueError:
            pair = None
        if pair is None or (not sep and not self.single):
            raise OptionError(f"expected {self.metavar}, e.g. {self.example}, got {text!r}")
        return self._check(pair, text)

    def from_value(self, value: Any) -> tuple[int, int]:
        if isinstance(value, str):
            return self.from_text(value)
        if (
            not isinstance(value, list | tuple)
            or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            raise OptionError(f"expected two whole numbers ({self.metavar}), got {value!r}")
        return self._check((value[0], value[1]), value)

    def _check(self, pair: tuple[int, int], given: Any) -> tuple[int, int]:
        first, second = self.metavar.split(self.sep) if self.metavar else ("first", "second")
        if not 1 <= pair[0] <= pair[1]:
            raise OptionError(f"need 1 <= {first} <= {second}, got {given!r}")
        return pair

    def to_texts(self, value: Any) -> list[str]:
        return [f"{value[0]}{self.sep}{value[1]}"]


@dataclass(frozen=True)
class Some(Kind):
    """Some of a few words, comma-separated (a list from Python); ``always`` first, whatever is given."""

    choices: tuple[str, ...]
    always: tuple[str, ...] = ()
    metavar: str | None = "LIST"
    what: str = "word"

    def from_text(self, text: str) -> tuple[str, ...]:
        return self._check([w.strip() for w in text.split(",") if w.strip()])

    def from_value(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            return self.from_text(value)
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise OptionError(f"expected a list of {self.what}s, got {value!r}")
        return self._check([v.strip() for v in value])

    def _check(self, words: list[str]) -> tuple[str, ...]:
        unknown = [w for w in words if w not in self.choices]
        if unknown:
            raise OptionError(
                f"unknown {self.what} {unknown[0]!r}; expected some of {', '.join(self.choices)}"
            )
        return tuple(dict.fromkeys((*self.always, *words)))

    def to_texts(self, value: Any) -> list[str]:
        return [",".join(value)]


# ---- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One row: an option's field and every spelling of it."""

    field: str
    kind: Kind
    default: Any
    help: str
    flag: str | None = ""  # the CLI flag, e.g. "--max-attempts" ("": the field's, dashed; None: none)
    discovery: bool = False  # changes what a clean run does: part of the discovery cache key
    reproduce: bool = True  # written into a case's reproduction line when not the default
    flag_const: Any = None  # a value the flag takes when given without one (nargs="?")
    ini_key: bool = True  # the option has a pytest ini key (killdrill_FIELD)
    into: tuple[str, ...] = ()  # a flag that sets several fields (``--kills`` -> min_kills, max_kills)

    def __post_init__(self) -> None:
        if self.flag == "":
            object.__setattr__(self, "flag", "--" + self.field.replace("_", "-"))

    @property
    def ini(self) -> str:
        """The pytest ini key: the field's name under ``killdrill_``."""
        return f"killdrill_{self.field}"

    def spell(self, how: Spelling, value: Any = None, *, with_value: bool = False) -> str:
        """This option as a caller of ``how`` writes it: ``--launcher``, ``killdrill_launcher``,
        ``launcher=``; ``with_value``: with ``value`` (``--launcher fork``, ``launcher='fork'``)."""
        if how is Spelling.FLAG and self.flag:
            if not with_value or isinstance(self.kind, Flag):
                return self.flag
            return " ".join([self.flag, *map(shlex.quote, self.kind.to_texts(value))])
        if how is Spelling.INI and self.ini_key:
            return f"{self.ini} = {' '.join(self.kind.to_texts(value))}" if with_value else self.ini
        return f"{self.field}={value!r}" if with_value else f"{self.field}="


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
        "broker",
        Text(metavar="URL"),
        None,
        "with --integration celery: the broker each case gets its own queues on, redis://... or "
        "amqp://... (default: redis://127.0.0.1:6379/0)",
        "--broker",
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
        "answer the agent's model calls (OpenAI /v1/chat/completions and /v1/responses, Anthropic "
        "/v1/messages) from this script; every drill points OPENAI_BASE_URL and ANTHROPIC_BASE_URL at "
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
        "pass_env",
        Names(metavar="NAME"),
        (),
        "pass this model provider variable (OPENAI_API_KEY, OPENAI_BASE_URL, ...) from the harness's "
        "environment to the agent: withheld by default, so a drill never reaches a real model",
        "--pass-env",
        discovery=True,
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

CHAOS_FAULTS = ("kill", "pause", "upgrade", "net")
"""What chaos may draw (``--faults``): kills always; pauses, upgrades and connection faults
(``net``: drop:/reset: toward the HTTP fakes, killdrill.faults.network) when asked."""


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
        "net (drop:/reset: toward the HTTP fakes, one run in two)",
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


def _plugin(field: str, kind: Kind, default: Any, help: str) -> Option:
    return Option(f"killdrill_{field}", kind, default, help, ini_key=False, reproduce=False)


PLUGIN_OPTIONS: tuple[Option, ...] = (
    _plugin(
        "point",
        Text(metavar="SCHEDULE"),
        None,
        "run each kill_point test with only this schedule (listed or not): the reproduction path",
    ),
    _plugin(
        "random",
        Number(int, 0, "a whole number >= 0", metavar="N"),
        0,
        "add N random schedules per drill test (needs discover= or command= in the marker)",
    ),
    _plugin(
        "seed",
        Number(int, None, "a whole number", metavar="S"),
        None,
        "seed of the random schedules (printed)",
    ),
    _plugin(
        "regressions",
        Text(metavar="PATH"),
        None,
        "replay the recorded failing schedules of a JSON corpus for tests whose command matches",
    ),
    _plugin("keep", Flag(), False, "keep the workdirs of passing cases too"),
    _plugin("json", Text(metavar="DIR"), None, "write each drill test's cases as JSON into DIR"),
    _plugin("rediscover", Flag(), False, "ignore cached discoveries and run them again"),
)
"""The pytest plugin's own ``--killdrill-*`` flags (its drill options are ``OPTIONS``' ini keys)."""


# ---- rules: options that go together -------------------------------------------------------------


class _Named:
    """One option in a rule's message: ``{field}`` is its name, ``{field:v}`` its name and value."""

    def __init__(self, row: Option, how: Spelling, value: Any) -> None:
        self.row, self.how, self.value = row, how, value

    def __format__(self, spec: str) -> str:
        return self.row.spell(self.how, self.value, with_value=spec == "v")


@dataclass(frozen=True)
class Rule:
    """Options that go together.  ``holds(values)`` false is an OptionError with ``message``, its
    ``{field}`` placeholders named as the caller spelled them (the first option of the message
    in its caller's spelling; an option the caller did not give, in that same spelling).
    ``holds`` None: the check needs more than the options (the command), its caller checks it."""

    message: str
    holds: Callable[[Mapping[str, Any]], bool] | None = None

    def check(self, values: Mapping[str, Any], spelled: Spelled, rows: Iterable[Option] = ()) -> None:
        """Raise this rule's error unless it holds for ``values``."""
        if self.holds is not None and not self.holds(values):
            raise self.error(values, spelled, rows)

    def error(self, values: Any, spelled: Spelled, rows: Iterable[Option] = (), **extra: Any) -> OptionError:
        """The error of this rule for ``values`` (an options object or a mapping of fields)."""
        table = {r.field: r for r in (*OPTIONS, *CHAOS_OPTIONS, *rows)}  # ``rows`` win a shared name

        def get(name: str) -> Any:
            return values.get(name) if isinstance(values, Mapping) else getattr(values, name, None)

        names = [f for _, f, _, _ in string.Formatter().parse(self.message) if f in table]
        first = _spelling(spelled, names[0], None) if names else _spelling(spelled, "", None)
        args = {f: _Named(table[f], _spelling(spelled, f, first), get(f)) for f in names}
        return OptionError(self.message.format(**args, **extra))


def _spelling(spelled: Spelled, name: str, fallback: Spelling | None) -> Spelling:
    if isinstance(spelled, Spelling):
        return spelled
    return spelled.get(name) or fallback or Spelling.KEYWORD


def _names(env: Mapping[str, str], *variables: str) -> bool:
    return any("{" + v + "}" in value for value in env.values() for v in variables)


DRILL_RULES: tuple[Rule, ...] = (
    Rule(
        "{broker} needs {integrations} celery (the broker is where Celery's tasks go)",
        lambda o: o["broker"] is None or "celery" in o["integrations"],
    ),
    Rule(
        "{model_variance} needs {model_script} (the model fake's script)",
        lambda o: o["model_variance"] is None or o["model_script"] is not None,
    ),
    Rule(
        "{env} names {{KILLDRILL_FAKES_URL}}, set for the agent only with {http_fakes} or {model_script}",
        lambda o: (
            o["http_fakes"]
            or o["model_script"] is not None
            or not _names(o["env"], "KILLDRILL_FAKES_URL", "KILLDRILL_FAKES_SECRET")
        ),
    ),
    Rule(
        "{env} names {{KILLDRILL_SMTP}}, set for the agent only with {smtp_fake}",
        lambda o: o["smtp_fake"] or not _names(o["env"], "KILLDRILL_SMTP"),
    ),
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

CHAOS_RULES: tuple[Rule, ...] = (
    Rule("{min_kills} is more than {max_kills}", lambda o: o["min_kills"] <= o["max_kills"]),
)
"""The rules tying two chaos options, checked with every ChaosOptions."""

CHAOS_UPGRADE = Rule(
    "{faults} ...,upgrade and {resume_with} go together (the upgrade's command)",
    lambda o: ("upgrade" in o["faults"]) == bool(o["resume_with"]),
)
"""A chaos option tied to a drill option: checked where both are known (``run_chaos``)."""


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
    spelled = spelled_fields(options, OPTIONS)
    spelled.update(dict.fromkeys(overrides, Spelling.KEYWORD))
    return dataclasses.replace(options, **overrides, spelled=spelled)


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


def reproduce_line(command: Sequence[str], options: DrillOptions, schedule: str) -> str:
    """``killdrill run`` of one case: the options that differ from the defaults, from the table."""
    args = ["killdrill", "run", "--schedule", str(schedule), *reproduce_args(options)]
    return shlex.join([*args, "--", *command])


def reproduce_args(options: DrillOptions) -> list[str]:
    """The flags that give ``options`` back, in table order, defaults and unreproduced fields left out."""
    args: list[str] = []
    for row in OPTIONS:
        value = getattr(options, row.field)
        if not row.reproduce or not row.flag or _same(value, row.default):
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
