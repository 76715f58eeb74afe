"""Nightly: the bundled examples' whole drills, 20 times in a row each (a flake is a bug).

Run with ``pytest nightly/test_nightly_drills.py``; not part of the per-push suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.examples import SETTLEMENT


@pytest.mark.parametrize("round_", range(20))
def test_settlement_whole_drill_passes(tmp_path: Path, round_: int) -> None:
    with Drill(SETTLEMENT, DrillOptions(root=tmp_path, workers=2, launcher="fork")) as drill:
        result = drill.run_all()
    assert result.ok, "\n\n".join(c.text() for c in result.cases if not c.ok)
