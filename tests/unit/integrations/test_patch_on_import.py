"""The patch-on-import hook every integration's activate/active/deactivate stands on: a target
patched when imported, reported active from install to undo, and put back whole by undo."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from killdrill.integrations import PatchOnImport


def test_install_patches_at_import_and_undo_puts_everything_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kd_toy_runtime.py").write_text("def run():\n    return 'real'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kd_toy_runtime", raising=False)
    undone: list[str] = []

    def patch(module: ModuleType) -> None:
        hook.replace(module, "run", lambda: "patched")  # put back by undo, as replace records it
        hook.undos[module.__name__] = lambda: undone.append(module.__name__)  # a patch made whole

    hook = PatchOnImport(("kd_toy_runtime",), patch)
    assert not hook.active
    hook.install()
    assert hook.active and hook.waiting  # nothing imported yet: waiting for it
    import kd_toy_runtime

    assert kd_toy_runtime.run() == "patched" and hook.active and not hook.waiting
    hook.undo()
    assert kd_toy_runtime.run() == "real" and undone == ["kd_toy_runtime"]
    assert not hook.active and not hook.undos and hook not in sys.meta_path
    monkeypatch.delitem(sys.modules, "kd_toy_runtime")
