"""The killdrill pytest plugin: kill-point drills as parametrized tests.

```python
AGENT = ["python", "-m", "agent", "--thread", "{thread}", "--db", "{workdir}/ckpt.sqlite"]

@pytest.mark.killdrill(discover=AGENT)            # or points=["during:payments.charge", ...]
def test_every_boundary(killdrill, kill_point):
    killdrill.run(AGENT, kill_point).assert_exactly_once()
```

Installed through the ``pytest11`` entry point named ``killdrill`` (``-p no:killdrill`` turns
it off).  Importing this module stays cheap: only pytest and the standard library; the
supervisor, the ledger (SQLAlchemy) and the verdict load when a fixture or ``discover=`` is
used.  Discovery runs once per command and options per session, and is kept in pytest's cache
keyed by the command and the stat of the agent's files, so collection stays fast.

Layer (as ``killdrill.pytest_plugin``): a front end, like ``cli``; may import every package but
``cli``.
"""

from __future__ import annotations

# pytest registers the hooks and fixtures it finds in this module (the pytest11 entry point):
# each role lives in its own module and is imported here, under its own name.
from killdrill.pytest_plugin._fixture import KilldrillFixture as KilldrillFixture
from killdrill.pytest_plugin._fixture import killdrill as killdrill
from killdrill.pytest_plugin._hooks import pytest_addoption as pytest_addoption
from killdrill.pytest_plugin._hooks import pytest_configure as pytest_configure
from killdrill.pytest_plugin._hooks import pytest_report_header as pytest_report_header
from killdrill.pytest_plugin._hooks import pytest_unconfigure as pytest_unconfigure
from killdrill.pytest_plugin._options import _INI as _INI
from killdrill.pytest_plugin._options import OPTION_NAMES as OPTION_NAMES
from killdrill.pytest_plugin._options import _ini_options as _ini_options
from killdrill.pytest_plugin._parametrize import kill_point as kill_point
from killdrill.pytest_plugin._parametrize import pytest_generate_tests as pytest_generate_tests
from killdrill.pytest_plugin._parametrize import random_schedules as random_schedules
from killdrill.pytest_plugin._plugins import PluginTester as PluginTester
from killdrill.pytest_plugin._plugins import killdrill_plugins as killdrill_plugins
from killdrill.pytest_plugin._session import _same_command as _same_command

__all__ = ["KilldrillFixture", "PluginTester", "random_schedules"]
