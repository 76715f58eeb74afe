"""The scripted human of ``--answer``: the drill's answers, handed out in order, each pending
interrupt keeping the answer it got first across kills and resumes.

The drill passes the answers in ``KILLDRILL_ANSWERS``, a JSON list of the texts as the user gave
them.  A text that parses as JSON is that value (``{"action": "continue"}``, ``true``, ``3``,
``"yes"``); any other text is itself (``yes``).

Which answer an interrupt gets is decided by durable state, never by a counter in the process: a
kill after an answer was handed to the framework, before the framework saved it, brings the same
interrupt back in the next attempt, and it must get the same answer (a process-local counter
would hand it the next one).  ``<workdir>/.killdrill/answers.json`` lists the interrupts answered
so far, in order, by the framework's stable id; it is written and synced before the answer is
handed over.  An interrupt already listed gets its answer again; a new one gets the next.

Imported by the agent (through an integration): standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from killdrill import envvars

__all__ = ["ANSWERS_ENV", "FILE", "answers_for", "can_answer", "configured", "decode", "given", "none_left"]

ANSWERS_ENV = envvars.ANSWERS
FILE = "answers.json"
"""In ``<workdir>/.killdrill/``: ``{"answered": [ID, ...]}``, the interrupts answered, in order."""

_lock = threading.Lock()
_memory: list[str] = []  # no workdir (an agent run outside a drill): this process only


def decode(text: str) -> Any:
    """The value of one ``--answer`` text: its JSON value when it parses as JSON, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def configured() -> bool:
    """True when the drill gave answers (``--answer``) to this process."""
    return ANSWERS_ENV in os.environ


def given() -> list[str]:
    """The answers' texts, in order (empty when none were given)."""
    raw = os.environ.get(ANSWERS_ENV)
    if not raw:
        return []
    try:
        texts = json.loads(raw)
    except ValueError:
        return []
    return [str(t) for t in texts] if isinstance(texts, list) else []


def _path() -> str | None:
    workdir = os.environ.get(envvars.WORKDIR)
    return os.path.join(workdir, ".killdrill", FILE) if workdir else None


@contextlib.contextmanager
def _answered() -> Iterator[list[str]]:
    """The ids answered so far, under a lock other processes of the workdir respect (concurrent
    resumers); what the block leaves in the list is written back and synced."""
    path = _path()
    with _lock:
        if path is None:
            yield _memory
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(path, encoding="utf-8") as fh:
                    ids = [str(i) for i in json.load(fh).get("answered", [])]
            except (OSError, ValueError, AttributeError):
                ids = []
            before = list(ids)
            yield ids
            if ids != before:
                tmp = path + ".tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump({"answered": ids}, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
                dirfd = os.open(os.path.dirname(path), os.O_RDONLY)
                try:
                    os.fsync(dirfd)
                finally:
                    os.close(dirfd)


def can_answer(ids: Sequence[str]) -> bool:
    """Whether every interrupt of ``ids`` has an answer (its own, or one still unused)."""
    texts = given()
    with _answered() as answered:
        new = [i for i in dict.fromkeys(ids) if i not in answered]
        return len(answered) + len(new) <= len(texts)


def answers_for(ids: Sequence[str]) -> list[Any] | None:
    """The answers of the pending interrupts ``ids`` (in that order), None when the answers given
    run out.  New ids take the next answers and are recorded before this returns."""
    texts = given()
    with _answered() as answered:
        new = [i for i in dict.fromkeys(ids) if i not in answered]
        if len(answered) + len(new) > len(texts):
            return None
        answered.extend(new)
        return [decode(texts[answered.index(i)]) for i in ids]


def none_left(integration: str, question: str) -> None:
    """Say on stderr that ``question`` (which wait, in the framework's words) found the answers
    given run out: ``killdrill: <integration>: <question> with no --answer left (N given)``."""
    sys.stderr.write(f"killdrill: {integration}: {question} with no --answer left ({len(given())} given)\n")
    sys.stderr.flush()
