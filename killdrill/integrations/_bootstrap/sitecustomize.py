"""killdrill's bootstrap: activates integrations in an agent nobody edited.

The supervisor puts this directory first on ``PYTHONPATH`` and names integrations in
``KILLDRILL_INTEGRATIONS`` (comma-separated, e.g. ``langgraph``).  Python imports the
first ``sitecustomize`` on ``sys.path`` at startup, so this one then loads the next
``sitecustomize`` further down ``sys.path`` (the user's or the distribution's): it never
shadows one.  Without ``KILLDRILL_INTEGRATIONS`` it imports nothing beyond what the
lookup of that next module needs.  Integrations stay lazy themselves: LangGraph is
patched by an import hook when the agent imports it, never imported here.  With integrations
on, the HTTP, SMTP and MCP clients are patched the same way so the runtime context an
integration sets reaches the served fakes (``killdrill.integrations._wire``).  With
``KILLDRILL_LISTEN_MARK`` (a deployment's service probed on a port) each ``socket.listen()``
leaves a line in that file (``killdrill.agent.listen_mark``), so the harness notices the port
open as it opens.
"""

from __future__ import annotations

import os
import sys


def _activate_integrations(names: str) -> None:
    from killdrill.integrations import _wire, find  # by module name or entry point

    _wire.activate()  # the runtime context the integrations set travels with wire calls too

    for name in filter(None, (n.strip() for n in names.split(","))):
        try:
            integration = find(name)
        except ImportError as exc:
            sys.stderr.write(
                f"killdrill: cannot load integration {name!r} from KILLDRILL_INTEGRATIONS: {exc}\n"
            )
            continue
        try:
            if integration.activate is not None:
                integration.activate()
        except Exception as exc:
            # A bad setting must stop the agent with a readable line, not run it unobserved.
            # `site` would print a traceback for SystemExit; nothing has started yet to clean up.
            sys.stderr.write(f"killdrill: integration {name!r}: {exc}\n")
            sys.stderr.flush()
            os._exit(2)


def _chain_load() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    later: list[str] = []
    seen_here = False
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            seen_here = True
        elif seen_here:
            later.append(entry)
    if not later:
        return
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    spec = PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    # Theirs becomes the `sitecustomize` module, as if killdrill's were not there.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _from_distribution(name: str, dists: list[str]) -> bool:
    """Whether the module ``name`` the agent is importing comes from one of ``dists`` (its file
    is one of the distribution's files): never a bare name, so the agent's own ``workflows.py``
    is not LlamaIndex's."""
    from importlib import metadata
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(name)
    if spec is None:
        return False
    files: set[str] = set()
    folders: tuple[str, ...] = ()
    if spec.has_location and spec.origin:  # a module or a package: its file
        files.add(os.path.realpath(spec.origin))
    else:  # a namespace package (langgraph): its folders, each ending in a separator
        folders = tuple(os.path.join(os.path.realpath(f), "") for f in spec.submodule_search_locations or ())
    for dist_name in dists:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            path = os.path.realpath(str(dist.locate_file(f)))
            if path in files or (folders and path.startswith(folders)):
                return True
    return False


class _ImportWatch:
    """Leaves ``imported-NAME`` in the workdir's state dir when the agent imports a watched
    module from its distribution (``KILLDRILL_DETECT``: ``NAME=DIST|DIST,...``, discovery runs
    only): how a drill notices a framework in an agent drilled without its integration.  A
    dotted NAME (an integration's module that runs another framework: ``Integration.covers``)
    counts when its top-level package comes from the distribution.  Read at lookup time:
    forked attempts bring their own env."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        for entry in os.environ.get("KILLDRILL_DETECT", "").split(","):
            module, _, dists = entry.partition("=")
            if module != name:
                continue
            workdir = os.environ.get("KILLDRILL_WORKDIR")
            if workdir and _from_distribution(name.partition(".")[0], dists.split("|")):
                try:
                    open(os.path.join(workdir, ".killdrill", "imported-" + name), "a").close()
                except OSError:
                    pass
        return None


if os.environ.get("KILLDRILL_LISTEN_MARK"):
    from killdrill.agent.listen_mark import install

    install()

if os.environ.get("KILLDRILL_DETECT"):
    sys.meta_path.insert(0, _ImportWatch())

_names = os.environ.get("KILLDRILL_INTEGRATIONS")
if _names:
    _activate_integrations(_names)
del _names
_chain_load()
