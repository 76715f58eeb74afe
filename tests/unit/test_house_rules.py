"""The rules of the house the import contract cannot check: module size, imports by name, every
folder of modules a package the contract sees, and no framework named outside its integration."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

from killdrill import integrations

ROOT = Path(__file__).resolve().parents[2]
TREES = ("killdrill", "fakes", "pytest_plugin")
MAX_LINES = 500


def _modules(*trees: str) -> list[Path]:
    return sorted(p for t in trees for p in (ROOT / t).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_is_over_500_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _modules(*TREES)}
    long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not long, f"split these by role (one module per role, at most {MAX_LINES} lines): {long}"


BY_NAME = re.compile(r"\bimport_module\(|\b__import__\(")
IMPORTS_BY_NAME = {
    "killdrill/__init__.py": "the public names, loaded lazily so an agent's import stays cheap",
    "killdrill/registry.py": "a registry's built-in declarations",
    "killdrill/integrations/__init__.py": "an integration found by its name (the registry of integrations)",
    "killdrill/process/template.py": "the modules a fork template preloads, named by the user",
    "fakes/wire/__init__.py": "the wire families of its own folder, each registering its routes",
}


def test_no_import_by_name_outside_the_registries() -> None:
    """An import by name is invisible to the import contract: only a registry may make one."""
    found = [
        str(p.relative_to(ROOT))
        for p in _modules(*TREES)
        if BY_NAME.search(p.read_text()) and str(p.relative_to(ROOT)) not in IMPORTS_BY_NAME
    ]
    assert not found, f"imports by name outside the registries (the contract cannot see them): {found}"


def test_every_folder_of_modules_is_a_package() -> None:
    """A folder of modules without ``__init__.py`` is outside the import contract."""
    folders = {p.parent for p in _modules("killdrill")}
    assert not [str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists()]


# Agents (users' code, which the records name as their examples and conform probes) may name their
# framework; so may the model fake's environment, which points every model SDK at the fake.
NAMES_ALLOWED = ("killdrill/integrations/", "killdrill/examples/", "killdrill/conform/probes/")
NAMES_ALLOWED_FILES = {
    "killdrill/drill/env.py": "the model fake's environment names the SDKs' variables",
    "fakes/model_responses.py": "the model fake serves the API an SDK calls, whichever framework runs",
}


def _framework_words() -> re.Pattern[str]:
    words: set[str] = set()
    for record in integrations.known().values():
        words |= {record.name, record.title, *record.aliases, *record.distributions}
    words |= {w.replace("_", "-") for w in words} | {w.replace("_", " ") for w in words}
    words.discard("")
    return re.compile(r"\b(" + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")\b", re.I)


def test_nothing_outside_an_integration_names_its_framework() -> None:
    words = _framework_words()
    hits = []
    for p in _modules(*TREES):
        rel = str(p.relative_to(ROOT))
        if rel.startswith(NAMES_ALLOWED) or rel in NAMES_ALLOWED_FILES:
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if m := words.search(line):
                hits.append(f"{rel}:{n}: {m[0]}")
    assert not hits, "a framework named outside its integration's folder:\n" + "\n".join(hits)


ENV_MODULE = "killdrill/envvars.py"
# Agents (users' code) read the variables by name, as users' agents do; the bootstrap runs in
# every agent at start and imports no part of killdrill until an integration is on.
ENV_NAMES_ALLOWED = ("killdrill/examples/", "killdrill/conform/probes/")
ENV_NAMES_ALLOWED_FILES = {
    "killdrill/integrations/_bootstrap/sitecustomize.py": "reads its variables before killdrill is imported",
}
ENV_NAME = re.compile(r"KILLDRILL_[A-Z0-9_]*")


def _env_literals(path: Path) -> list[tuple[int, str]]:
    """The ``KILLDRILL_*`` names in ``path``'s string literals and keyword names (docstrings not)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    docstrings |= {  # an attribute's docstring: a string expression after an assignment
        id(b.value)
        for node in ast.walk(tree)
        for a, b in itertools.pairwise(node.body if isinstance(getattr(node, "body", None), list) else [])
        if isinstance(a, ast.Assign | ast.AnnAssign)
        and isinstance(b, ast.Expr)
        and isinstance(b.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str | bytes)
            and id(node) not in docstrings
        ):
            text = node.value if isinstance(node.value, str) else node.value.decode(errors="replace")
            found += [(node.lineno, m) for m in ENV_NAME.findall(text)]
        elif isinstance(node, ast.keyword) and node.arg and node.arg.startswith("KILLDRILL_"):
            found.append((node.value.lineno, node.arg))
    return found


def _declared_names() -> set[str]:
    from killdrill import envvars

    return {v for k, v in vars(envvars).items() if k.isupper() and isinstance(v, str)}


def test_the_agent_environment_is_named_only_in_its_module() -> None:
    """A ``KILLDRILL_*`` variable in code is a constant of ``killdrill.envvars`` (who sets it, who
    reads it, its format), or an integration's own ``KILLDRILL_<NAME>_*`` declared in its folder."""
    hits = []
    for p in _modules(*TREES):
        rel = str(p.relative_to(ROOT))
        if rel == ENV_MODULE or rel.startswith(ENV_NAMES_ALLOWED) or rel in ENV_NAMES_ALLOWED_FILES:
            continue
        parts = p.relative_to(ROOT).parts
        own = (
            f"KILLDRILL_{parts[2].upper()}_"
            if parts[:2] == ("killdrill", "integrations") and len(parts) > 3
            else None
        )
        hits += [f"{rel}:{n}: {name}" for n, name in _env_literals(p) if not (own and name.startswith(own))]
    assert not hits, "name the constant of killdrill.envvars instead:\n" + "\n".join(hits)


def test_agents_read_only_declared_variables() -> None:
    """The agents and the bootstrap name variables as users do: each is one the harness declares."""
    declared = _declared_names()
    prefixes = tuple(f"KILLDRILL_{name.upper()}_" for name in integrations.known())
    hits = []
    for p in _modules(*TREES):
        rel = str(p.relative_to(ROOT))
        if rel.startswith(ENV_NAMES_ALLOWED) or rel in ENV_NAMES_ALLOWED_FILES:
            hits += [
                f"{rel}:{n}: {name}"
                for n, name in _env_literals(p)
                if name != "KILLDRILL_" and name not in declared and not name.startswith(prefixes)
            ]
    assert not hits, "a variable killdrill.envvars does not declare:\n" + "\n".join(hits)


def test_a_new_literal_is_caught(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""KILLDRILL_DOC is prose."""\nX = "KILLDRILL_X"\n"""KILLDRILL_ATTR"""\nf(KILLDRILL_Y=1)\n'
    )
    assert [name for _, name in _env_literals(module)] == ["KILLDRILL_X", "KILLDRILL_Y"]


PACKAGES = {"killdrill": "killdrill", "fakes": "killdrill.fakes", "pytest_plugin": "killdrill.pytest_plugin"}
# Cycles left to break, each with why it is still there (a new cycle fails; a broken one must leave).
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _module_names() -> dict[str, Path]:
    out = {}
    for tree, dotted in PACKAGES.items():
        for p in _modules(tree):
            parts = [dotted, *p.relative_to(ROOT / tree).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours ``name`` imports anywhere in it: at the top, in a function, for types."""

    def ours(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {m for a in node.names if (m := ours(a.name))}
        elif isinstance(node, ast.ImportFrom):
            base = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
            for a in node.names:
                found = f"{module}.{a.name}" if f"{module}.{a.name}" in known else ours(module)
                if found:
                    out.add(found)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_import_cycle() -> None:
    """Modules import one way (a cycle means two modules split by size, not by role), counting
    every import: at the top, in a function, and for types only."""
    known = _module_names()
    cycles = set(_cycles({name: _imports(name, path, known) for name, path in known.items()}))
    new = [sorted(c) for c in cycles - set(KNOWN_CYCLES)]
    assert not new, f"import cycles (split the modules by role): {new}"
    gone = [sorted(c) for c in set(KNOWN_CYCLES) - cycles]
    assert not gone, f"broken cycles still listed in KNOWN_CYCLES: {gone}"


def test_a_cycle_is_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


PRIVATE_IMPORTS_TO_MOVE: dict[tuple[str, str], str] = {}
"""Importers of another package's private module, each with the public name to import instead."""


def test_no_private_module_is_imported_from_another_package() -> None:
    """A leading underscore marks a module no other package imports: the package's ``__init__``
    names what others use (so a module can move inside its package without breaking them)."""
    known = _module_names()
    found = []
    for name, path in known.items():
        for module in _imports(name, path, known):
            parts = module.split(".")
            private = next(
                (i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None
            )
            if private is None:
                continue
            owner = ".".join(parts[:private])
            if (
                not (name == owner or name.startswith(owner + "."))
                and (name, module) not in PRIVATE_IMPORTS_TO_MOVE
            ):
                found.append(f"{name} -> {module}")
    assert not found, "private modules imported from another package:\n" + "\n".join(found)


def test_the_cli_imports_no_database_library_it_does_not_use() -> None:
    """SQLAlchemy is a fifth of the CLI's start (0.14 s of every ``killdrill`` command): only a
    PostgreSQL ledger, ``--effect-table`` and the audit need it, and they import it themselves."""
    import subprocess
    import sys

    code = "import sys, killdrill.cli.commands; print([m for m in sys.modules if m.startswith('sqlalchemy')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
