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
