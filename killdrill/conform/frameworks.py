"""The frameworks ``killdrill conform`` probes, read from the integrations' records (each record's
:class:`~killdrill.integrations.Probe`): what to install, how to run the probe, which point
commits its middle step, and what a property cannot mean for it (with why)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from killdrill.errors import extra_name, install_hint
from killdrill.integrations import Integration, known


@dataclass(frozen=True)
class Framework:
    """One framework's probe and its points.  ``committed`` is the point where the framework has
    recorded the middle step ``charge`` (the kill of prefix continuation and the fork); ``rerun`` is
    the point a re-execution of it reaches again; ``next_point`` the point of the step after it."""

    name: str  # the integration (--integration NAME)
    title: str
    distribution: str  # whose version the table shows
    module: str  # importable when installed
    extra: str  # the extra that installs the framework with its integration's distribution
    committed: str
    committed_means: str = "the framework recorded the step"
    rerun: str = "before:charge"
    next_point: str = "before:notify"
    deliver_barrier: str = "before:deliver"
    na: dict[str, str] = field(default_factory=dict)  # property -> why it does not apply
    not_probed: dict[str, str] = field(default_factory=dict)  # property -> why no probe is bundled
    options: dict[str, Any] = field(default_factory=dict)  # extra DrillOptions fields
    install_note: str = ""
    missing_note: str = ""  # why killdrill has no integration for it yet

    probe: str = ""  # the probe agent's module (python -m PROBE)
    plugin: str = ""  # the distribution that declared the integration (empty: killdrill's own)

    def model_script(self) -> str | None:
        """The scripted model's file of a probe that calls a model (the YAML beside the probe's
        module, same name), or None."""
        if not self.options.get("model"):
            return None
        spec = importlib.util.find_spec(self.probe)
        if spec is None or spec.origin is None:
            return None
        return str(Path(spec.origin).with_suffix(".yaml"))

    def command(self, *extra: str) -> list[str]:
        return ["python", "-m", self.probe, "--thread", "{thread}", "--workdir", "{workdir}/state", *extra]

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def install_hint(self) -> str:
        """How to install the framework: killdrill's extra for its own integrations; for a
        plugin's, its own distribution's extra, or else the framework's distribution."""
        if not self.plugin:
            return install_hint(self.extra)
        if self.extra:
            return f'pip install "{self.plugin}[{extra_name(self.extra)}]"'
        return f"pip install {self.distribution}"

    def integration_available(self) -> bool:
        return True  # read from an integration's record


def _framework(i: Integration) -> Framework:
    assert i.probe is not None
    p = i.probe
    return Framework(
        i.name,
        i.title or i.name,
        p.distribution,
        i.modules[0] if i.modules else i.name,
        p.extra,
        committed=p.committed,
        committed_means=p.committed_means,
        rerun=p.rerun,
        next_point=p.next_point,
        deliver_barrier=p.deliver_barrier,
        na=dict(p.na),
        options=dict(p.options),
        install_note=p.install_note,
        probe=p.module,
        plugin=i.plugin,
    )


def frameworks() -> tuple[Framework, ...]:
    """Every known integration that declares a probe, in the table's order (its probe's ``order``)."""
    found = [i for i in known().values() if i.probe is not None]
    found.sort(key=lambda i: (i.probe.order if i.probe else 0, i.name))
    return tuple(_framework(i) for i in found)


def quick() -> tuple[str, ...]:
    """The frameworks of the fast subset CI runs (``Probe.quick``)."""
    return tuple(i.name for i in known().values() if i.probe is not None and i.probe.quick)


def by_name(names: list[str] | None) -> list[Framework]:
    """The frameworks asked for (all by default), in the table's order; an unknown name is an error."""
    table = frameworks()
    if not names:
        return list(table)
    by = {f.name: f for f in table}
    unknown = [n for n in names if n not in by]
    if unknown:
        raise KeyError(unknown[0])
    return [f for f in table if f.name in names]
