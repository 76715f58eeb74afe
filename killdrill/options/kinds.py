"""The value kinds of the option tables (one parser per kind of value: its bound, its pytest ini
type, its spelling back as text) and the row type, :class:`Option`, that gives a field a kind
and every spelling.  Standard library only.

Whitespace, one rule per value kind: names (keys, provider ops, identity fields, hook patterns,
integration/module names) are stripped; an ``env`` value is kept exactly as written.
"""

from __future__ import annotations

import abc
import enum
import json
import math
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from killdrill.errors import UsageError


class OptionError(UsageError):
    """An option's value is wrong, or two options do not go together; the text names the
    option(s) as the caller spelled them and says what was expected."""


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
    once: str | None = None  # a key given twice is a mistake: what a key names ("service")

    def item(self, text: str) -> tuple[str, Any]:
        return self.split(text)

    def combine(self, items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if self.once is not None and key in out:
                raise OptionError(f"{self.once} {key!r} is given twice (the second would replace the first)")
            out[key] = value
        return out

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


class Spelling(enum.Enum):
    """How a caller names options, so a message can name them the same way."""

    FLAG = "flag"  # the command line: --max-attempts
    INI = "ini"  # a pytest ini file: killdrill_max_attempts
    KEYWORD = "keyword"  # Python: a marker, the fixture, DrillOptions/Drill: max_attempts=


Spelled = Spelling | Mapping[str, Spelling]
"""One spelling for every field, or field by field (the plugin's ini, marker and call layers)."""


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
