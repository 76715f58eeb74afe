"""Findings: one-line diagnoses an integration leaves on the agent's stderr for the verdict.

An integration sometimes knows *why* a resume cannot go on where the harness only sees a
process that never exits (DBOS leaving another application version's workflows pending).
It writes one line, ``killdrill: finding CAUSE: TEXT``, to stderr; the drill reads the
attempt's stderr tail and reports that cause instead of a bare ``hang``.

Imported by the agent (through integrations) and by the harness: standard library only.
"""

from __future__ import annotations

import re
import sys

__all__ = ["PREFIX", "Finding", "finding_line", "findings_in"]

PREFIX = "killdrill: finding "
_LINE = re.compile(r"^killdrill: finding (?P<cause>[a-z0-9_]+): (?P<text>.+)$", re.MULTILINE)


class Finding(tuple[str, str]):
    """``(cause, text)``: a stable cause name and what the integration observed."""

    @property
    def cause(self) -> str:
        return self[0]

    @property
    def text(self) -> str:
        return self[1]


def finding_line(cause: str, text: str) -> None:
    """Write one finding to stderr (flushed: the process may be killed right after)."""
    line = f"{PREFIX}{cause}: {' '.join(text.split())}\n"
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def findings_in(stderr: str) -> list[Finding]:
    """The findings in an attempt's stderr (tail), first one first, each cause once."""
    seen: dict[str, Finding] = {}
    for m in _LINE.finditer(stderr):
        seen.setdefault(m["cause"], Finding((m["cause"], m["text"].strip())))
    return list(seen.values())
