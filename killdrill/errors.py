"""The harness's errors and exit codes: one root, so every front end can turn any of them into one line.

Bottom layer: standard library only. An error the *agent* sees from a fake (``FakeProviderError``)
or from the effects toolkit (``EffectError``) is not here: those are the agent's business, not
the harness's, and never end a drill.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What ``killdrill`` exits with (and what the pytest plugin's usage errors mean)."""

    OK = 0  # every case exactly-once
    VIOLATION = 1  # an exactly-once violation was found
    ERROR = 2  # bad usage or a harness error, said in one line
    INTERRUPTED = 130  # Ctrl-C: every attempt was killed
    TERMINATED = 143  # SIGTERM: every attempt was killed


class KilldrillError(Exception):
    """Root of every error the harness raises on purpose; its text is one line for the user."""

    exit_code: ExitCode = ExitCode.ERROR


class UsageError(KilldrillError):
    """The user asked for something that cannot be done as asked (bad option, bad file, bad path)."""


class HarnessError(KilldrillError):
    """The harness could not do its job (bad command, spawn failure, unusable ledger)."""


def one_line(exc: BaseException) -> tuple[str, str]:
    """An error as the front ends print it: its first line (without a ``killdrill:`` prefix),
    then any context after it (e.g. the tail of a failed clean run's stderr). The CLI and the
    pytest plugin both say errors through this."""
    first, _, rest = str(exc).strip().partition("\n")
    return first.removeprefix("killdrill: ").strip(), rest


def install_hint(extra: str) -> str:
    """How to install one of killdrill's extras, spelled as every pip normalizes it (PEP 685:
    ``some-extra``, never ``some_extra``, which pip 23 refuses) and runnable from a clone,
    since killdrill is installed from its checkout."""
    return f'pip install -e ".[{extra_name(extra)}]" (in killdrill\'s clone)'


def extra_name(extra: str) -> str:
    """An extra's name as pip normalizes it (PEP 685: lowercase, runs of ``-_.`` one ``-``)."""
    return "-".join(part for part in extra.lower().replace("_", "-").replace(".", "-").split("-") if part)
