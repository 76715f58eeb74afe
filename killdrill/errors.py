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

    def one_line(self) -> str:
        """The message as one line (what the CLI prints and the plugin reports)."""
        return " ".join(str(self).split())


class UsageError(KilldrillError):
    """The user asked for something that cannot be done as asked (bad option, bad file, bad path)."""


class HarnessError(KilldrillError):
    """The harness could not do its job (bad command, spawn failure, unusable ledger)."""
