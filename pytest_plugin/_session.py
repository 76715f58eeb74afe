"""Per-session state: the settings read once from options and ini, the regressions corpus and
the session's (cached) discoveries."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from killdrill.errors import one_line
from killdrill.integrations import check_options
from killdrill.options import OptionError, Spelled, Spelling, from_fields
from killdrill.pytest_plugin._cache import DiscoveryCache, Key, discovery_key
from killdrill.pytest_plugin._concurrent import AheadCases
from killdrill.pytest_plugin._options import _check_schedule, _ini_options, _Usage
from killdrill.pytest_plugin._pool import TemplatePool

if TYPE_CHECKING:
    from killdrill.records import Discovery


@dataclass
class _State:
    """Per-session settings read once from options and ini, plus the discovery cache and the
    session's fork templates."""

    config: pytest.Config
    seed: int
    token: str
    random: int
    point: str | None
    regressions_path: str | None
    regressions: list[tuple[tuple[str, ...], str]]
    ini_options: dict[str, Any]
    keep: bool
    json_dir: Path | None
    cache: DiscoveryCache
    workers: int | None = None  # --killdrill-workers: the session's default of ``workers``
    concurrent: bool = True  # workers > 1 starts a drill test's cases at once (not in an xdist worker)
    ahead: AheadCases = field(default_factory=AheadCases)
    errors: dict[str, str] = field(default_factory=dict)
    pool: TemplatePool = field(default_factory=TemplatePool)
    keys: dict[str, Key] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: pytest.Config) -> _State:
        workerinput = getattr(config, "workerinput", None) or {}
        seed = config.getoption("killdrill_seed")
        if seed is None:
            seed = workerinput.get("killdrill_seed", random.SystemRandom().randrange(10**6))
        token = workerinput.get("killdrill_token") or uuid.uuid4().hex
        point = config.getoption("killdrill_point")
        if point is not None:
            point = _check_schedule(point, "--killdrill-point")
        path = config.getoption("killdrill_regressions")
        regressions = _load_regressions(path) if path else []
        try:
            ini_options = _ini_options(config)
        except _Usage as exc:
            raise pytest.UsageError(str(exc)) from None
        json_dir = config.getoption("killdrill_json")
        if json_dir:  # checked now, not after every drill test has run
            from killdrill.errors import UsageError
            from killdrill.report.outputs import check_output_dir

            try:
                check_output_dir(json_dir, f"--killdrill-json {json_dir}")
            except UsageError as exc:
                raise pytest.UsageError(f"killdrill {exc}") from None
        cache_dir = None
        if getattr(config, "cache", None) is not None:
            cache_dir = config.cache.mkdir("killdrill")
        return cls(
            config=config,
            seed=int(seed),
            token=token,
            random=max(0, config.getoption("killdrill_random") or 0),
            point=point,
            regressions_path=path,
            regressions=regressions,
            ini_options=ini_options,
            keep=bool(config.getoption("killdrill_keep")),
            workers=config.getoption("killdrill_workers"),
            concurrent=getattr(config, "workerinput", None) is None,
            json_dir=Path(json_dir).resolve() if json_dir else None,
            cache=DiscoveryCache(
                cache_dir, token=token, force=bool(config.getoption("killdrill_rediscover"))
            ),
        )

    def options(self, *layers: Mapping[str, Any]) -> dict[str, Any]:
        """ini, ``--killdrill-workers``, then marker, then call keywords (later wins);
        ``--killdrill-keep`` on top."""
        merged = dict(self.ini_options)
        if self.workers is not None:
            merged["workers"] = self.workers
        for layer in layers:
            merged.update(layer)
        if self.keep:
            merged["keep"] = True
        return merged

    def spelled(self, *layers: Mapping[str, Any]) -> dict[str, Spelling]:
        """How the caller named each option of ``self.options(*layers)``: an ini key, or a keyword
        (of the marker or the call), so a message names it the same way."""
        spelled = dict.fromkeys(self.ini_options, Spelling.INI)
        for layer in layers:
            spelled.update(dict.fromkeys(layer, Spelling.KEYWORD))
        return spelled

    def discovery(
        self, command: Sequence[str], options: Mapping[str, Any], spelled: Spelled = Spelling.KEYWORD
    ) -> Discovery:
        """The session's discovery of ``command`` (cached); raises HarnessError when it fails, a
        :class:`_Usage` when the options do not go together."""
        from killdrill.drill import Drill, HarnessError

        opts = {k: v for k, v in options.items() if k != "root"}
        try:
            checked = from_fields(opts, spelled)
            check_options(checked)  # the integrations' own options: a usage error too
        except OptionError as exc:
            raise _Usage(f"killdrill {exc}") from None
        # The key stats every file of the agent's package: once per command and options per session
        # (collection used it already), not again in every test.
        ident = json.dumps([list(command), opts], sort_keys=True, default=str)
        key = self.keys.get(ident)
        if key is None:
            key = self.keys[ident] = discovery_key(command, opts)
            if opts.get("launcher") == "fork":
                self._prestart(command, opts)
        if key.digest in self.errors:
            raise HarnessError(self.errors[key.digest])

        def make() -> Discovery:
            if opts.get("ledger_url"):  # a file that is not a ledger: one line, not the agent's traceback
                from killdrill.ledger import Ledger

                Ledger(opts["ledger_url"], "kd-check").close()
            root = _session_folder(self.config, "killdrill-discovery")
            drill: Drill | None = None
            with discarded_if_interrupted(root):
                try:
                    drill = Drill(command, checked, root=root)
                    drill.share_templates(self.pool)  # the tests of this command fork from its template
                    return drill.discover()
                finally:
                    if drill is not None:
                        drill.close()  # its runs' short temporary folder too; the pool's template lives on
                    if not opts.get("keep"):  # its clean runs' workdirs are deleted in the background
                        from killdrill.drill.workdirs import remove_when_emptied

                        remove_when_emptied(root)

        try:
            return self.cache.get_or_make(key, make)
        except _harness_errors() as exc:
            self.errors[key.digest] = one_line(exc)[0]
            raise HarnessError(self.errors[key.digest]) from None

    def _prestart(self, command: Sequence[str], opts: Mapping[str, Any]) -> None:
        """Start the command's fork template in the background, once per command and options: it
        imports the agent (a framework: seconds) while this process makes the discovery, or, under
        xdist, waits for the worker that makes it; before, a waiting worker paid the imports again
        in its first test (-n 2 was 2x the CLI's --workers 2).  The template joins the
        session's pool, which every test's drill forks from; its errors are the tests' to report."""
        import threading

        root = _session_folder(self.config, "killdrill-prestart")  # never outside pytest's basetemp

        def start() -> None:
            from killdrill.drill import Drill

            try:
                drill = Drill(command, **opts, root=root)
                drill.share_templates(self.pool)
                drill.setup.fork_template()  # the template, started now
                drill.close()
            except Exception:  # the discovery or the test reports it, in one line
                pass
            finally:
                shutil.rmtree(root, ignore_errors=True)

        threading.Thread(target=start, name="killdrill-prestart", daemon=True).start()


_STATE = pytest.StashKey[_State]()


def _harness_errors() -> tuple[type[Exception], ...]:
    """What fails a test in one line (never a traceback through killdrill): every KilldrillError,
    and the harness errors not yet under that root (the layered redesign moves them there)."""
    from killdrill.errors import HarnessError, KilldrillError
    from killdrill.ledger import LedgerError
    from killdrill.points import ScheduleError
    from killdrill.process.forks import TemplateError

    return (KilldrillError, HarnessError, LedgerError, TemplateError, ScheduleError)


@contextlib.contextmanager
def discarded_if_interrupted(root: Path) -> Iterator[None]:
    """Ctrl-C or SIGTERM (``KeyboardInterrupt``) in a drill under ``root``: the workdirs of the
    runs it cut short are evidence of nothing, so they go with the runs' processes (already
    killed by the drill on the way out), and ``root`` too once empty: a stopped session leaves
    no folder.  What was there before (a failed case kept as evidence) stays."""
    before = set(os.listdir(root)) if root.is_dir() else set()
    try:
        yield
    except KeyboardInterrupt:
        if root.is_dir():
            for name in set(os.listdir(root)) - before:
                shutil.rmtree(root / name, ignore_errors=True)
            with contextlib.suppress(OSError):
                root.rmdir()  # only if empty
        raise


def _session_folder(config: pytest.Config, prefix: str) -> Path:
    """A new folder under pytest's basetemp, never one used before by this process: the ledger
    keeps engines per SQLite path, and in-process inner runs (pytester) reuse basetemp paths."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        return Path(factory.mktemp(f"{prefix}-{uuid.uuid4().hex[:8]}", numbered=False))
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"{prefix}-"))


def _load_regressions(path: str) -> list[tuple[tuple[str, ...], str]]:
    """``{"regressions": [{"command": [...], "schedule": "...", "kinds": [...]}, ...]}``
    (a bare list of such entries is accepted too; a string command is split like a shell)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--killdrill-regressions {path}: {exc}") from None
    entries = data.get("regressions") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise pytest.UsageError(f'--killdrill-regressions {path}: no "regressions" list')
    out: list[tuple[tuple[str, ...], str]] = []
    for i, entry in enumerate(entries):
        command = entry.get("command") if isinstance(entry, dict) else None
        schedule = entry.get("schedule") if isinstance(entry, dict) else None
        if isinstance(command, str):
            command = shlex.split(command)
        if not isinstance(command, list) or not isinstance(schedule, str):
            raise pytest.UsageError(
                f"--killdrill-regressions {path}: entry {i} needs a command list and a schedule string"
            )
        out.append((tuple(command), _check_schedule(schedule, f"--killdrill-regressions {path} entry {i}")))
    return out


def _same_command(a: Sequence[str], b: Sequence[str]) -> bool:
    """Commands match argument by argument; ``python``, ``python3`` and this interpreter agree."""
    import sys

    def norm(cmd: Sequence[str]) -> list[str]:
        cmd = [str(x) for x in cmd]
        if cmd and (cmd[0] in ("python", "python3") or cmd[0] == sys.executable):
            cmd[0] = "python"
        return cmd

    return norm(a) == norm(b)
