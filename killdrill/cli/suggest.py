"""Did-you-mean for the command line: a mistyped flag (``--langraph``, ``--schedual``) or
subcommand (``dril``) names the closest real one, as git and cargo do (argparse of Python 3.11
has no ``suggest_on_error``)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Sequence

from killdrill.registry import nearest

__all__ = ["all_flags", "closest", "suggest", "unknown_flag_hint"]

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)")


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to ``word`` (case and ``-``/``_`` aside first, then difflib's ratio
    of at least 0.6), else None."""
    return nearest(word, list(dict.fromkeys(candidates)))


def all_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every ``--flag`` of ``parser`` and of its subcommands."""
    flags = [s for s in parser._option_string_actions if s.startswith("--")]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags += all_flags(sub)
    return flags


def _flag_hints(words: Sequence[str], flags: Sequence[str]) -> list[str]:
    hints = []
    for word in words:
        name = word.split("=", 1)[0]
        if name.startswith("--") and name not in flags:
            match = closest(name, flags)
            if match:
                hints.append(f"{name}: did you mean {match}?")
    return hints


def suggest(message: str, parser: argparse.ArgumentParser, flags: Sequence[str] | None = None) -> str:
    """``message`` (argparse's error) with a did-you-mean for each mistyped flag or subcommand."""
    m = _INVALID_CHOICE.search(message)
    if m:
        choices = re.findall(r"'([^']*)'", m.group(2))
        match = closest(m.group(1), choices)
        return f"{message}: did you mean {match!r}?" if match else message
    m = _UNRECOGNIZED.search(message)
    if m:
        hints = _flag_hints(m.group(1).split(), flags if flags is not None else all_flags(parser))
        return f"{message} ({'; '.join(hints)})" if hints else message
    return message


def unknown_flag_hint(words: Sequence[str], parser: argparse.ArgumentParser) -> str | None:
    """A did-you-mean for the first mistyped ``--flag`` among ``words`` (argparse's leftovers), else None."""
    hints = _flag_hints(words, all_flags(parser))
    return "; ".join(hints) if hints else None
