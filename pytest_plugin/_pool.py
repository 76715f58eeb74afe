"""The session's fork templates: one per template configuration, shared by every test.

A fork template imports the agent's heavy modules once (a framework: seconds); built per test, as
the fixture's drills did, each test paid them again (pytest 5-7x slower than the CLI
on the same cases).  The CLI's drill forks all its cases from one template; a pytest session
(each xdist worker is one) now does the same for every test whose template would be identical.

What is shared is only what the CLI already shares between cases: the template process.  A case
keeps its own workdir, ledger, thread and keeper: each attempt is a fresh fork that replaces its
environment, argv, cwd and stdio with its own spec.  The key is everything a template is started
with (interpreter, preloads, environment, cwd), minus the variables a drill fills with
its own root and pytest's current test (the template never reads them; attempts bring theirs),
so a test that changes the environment, preloads or integrations gets its own template.  A
template that died (killed, or hung up on after an interrupted request) is replaced on the next
use.  All of them stop at the session's end (``pytest_unconfigure``), and by themselves when the
process dies (the socket closes).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from killdrill import envvars

if TYPE_CHECKING:
    from killdrill.process.forks import ForkTemplate

# Set per drill (its root) or per test (pytest's current test) in a template's environment; no
# template process reads them, and every attempt's own environment has its values.
_PER_DRILL = frozenset({envvars.WORKDIR, envvars.LEDGER, envvars.THREAD, "PYTEST_CURRENT_TEST"})


class TemplatePool:
    """Fork templates keyed by how they are started; a ``killdrill.drill.base.TemplateSource``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._templates: dict[str, ForkTemplate] = {}
        self.started = 0  # templates this pool started (the tests check the sharing with it)

    def __call__(
        self, python: str, preload: Sequence[str], env: Mapping[str, str], cwd: str | None
    ) -> ForkTemplate:
        from killdrill.process.forks import ForkTemplate

        clean = {k: v for k, v in env.items() if k not in _PER_DRILL}
        key = json.dumps([python, list(preload), sorted(clean.items()), cwd])
        with self._lock:
            found = self._templates.pop(key, None)
            if found is not None and not found.dead and found.owner == os.getpid():
                self._templates[key] = found
                return found
            if found is not None:
                found.close()
            template = ForkTemplate(python, preload=preload, env=clean, cwd=cwd).start()
            self.started += 1
            self._templates[key] = template
            return template

    def close(self) -> None:
        """Stop every template (each has its keepers clean up first)."""
        with self._lock:
            templates, self._templates = list(self._templates.values()), {}
        for template in templates:
            template.close()
