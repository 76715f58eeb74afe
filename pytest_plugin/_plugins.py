"""``killdrill_plugins``: test an integration as its users get it (pytest's ``pytester`` as the model).

```python
def test_acme_points(killdrill_plugins, tmp_path):
    killdrill_plugins.distribution("acme-flows", {"acme/__init__.py": ACME})  # the framework
    killdrill_plugins.install("acme", INTEGRATION_SOURCE)  # your integration, as an entry point
    with Drill(AGENT, DrillOptions(root=tmp_path, integrations=("acme",))) as drill:
        assert "committed:charge" in drill.points()
```

Everything is undone after the test: the folder of distributions leaves ``sys.path`` and the
agents' ``PYTHONPATH``, the modules imported from it leave ``sys.modules``, and the integrations
found or registered during the test are forgotten (:func:`killdrill.integrations.scope`).
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from killdrill import integrations
from killdrill.integrations import ENTRY_POINT_GROUP, Integration

__all__ = ["PluginTester", "killdrill_plugins"]


class PluginTester:
    """Installs distributions and integrations for one test, in a folder on ``sys.path`` and on
    every agent's ``PYTHONPATH`` (as pip lays a distribution out: its files and a ``dist-info``)."""

    def __init__(self, site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.site = site
        """The folder the distributions are installed in."""
        self._monkeypatch = monkeypatch
        site.mkdir(parents=True, exist_ok=True)
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        )

    def distribution(
        self, name: str, files: Mapping[str, str], entry_points: Mapping[str, Mapping[str, str]] | None = None
    ) -> Path:
        """Install the distribution ``name`` (version 1.0): ``files`` by their path in the site (their
        text dedented), ``entry_points`` by group (``{"killdrill.integrations": {"acme": "kd_acme"}}``).
        Returns its ``dist-info`` folder."""
        for path, text in files.items():
            target = self.site / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(text))
        info = self.site / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))
        if entry_points:
            groups = [
                f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
                for group, eps in entry_points.items()
            ]
            (info / "entry_points.txt").write_text("\n".join(groups))
        importlib.invalidate_caches()
        integrations.rescan()
        return info

    def install(
        self, name: str, source: str, *, module: str | None = None, distribution: str | None = None
    ) -> Integration:
        """Install the integration ``name`` from ``source`` (a module's text: its ``activate()`` and
        ``INTEGRATION``), as the module ``module`` (default ``kd_NAME``) of the distribution
        ``distribution`` (default ``killdrill-NAME``), named by an entry point in the group
        ``killdrill.integrations``: found by the harness and by every agent's bootstrap, as an
        installed plugin is.  Returns its record (a record the contract refuses: the one line)."""
        module = module or f"kd_{name}"
        distribution = distribution or f"killdrill-{name}"
        self.distribution(distribution, {f"{module}.py": source}, {ENTRY_POINT_GROUP: {name: module}})
        return integrations.find(name)

    def register(self, record: Integration) -> Integration:
        """Make ``record`` known in this process for the test (the harness's side only: an agent's
        bootstrap finds an integration by module or entry point, so drill one with :meth:`install`)."""
        return integrations.register(record)


@pytest.fixture
def killdrill_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginTester]:
    """A :class:`PluginTester` for this test; everything it installed is gone after it."""
    before = set(sys.modules)
    site = tmp_path / "killdrill-plugins"
    with integrations.scope():
        yield PluginTester(site, monkeypatch)
    for name in set(sys.modules) - before:  # what was imported from the site goes with it
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if origin.startswith(str(site)):
            del sys.modules[name]
