"""``killdrill_plugins``: an integration installed for one test is found there, by the harness and
as a distribution's entry point, and is gone after it (the registry, ``sys.path``, ``sys.modules``)."""

from __future__ import annotations

import pytest

INNER = '''
import os, sys

from killdrill import integrations

SOURCE = """
from killdrill.integrations import Integration

INTEGRATION = Integration("acme", title="Acme", distributions=("acme-flows",), modules=("acme",))


def activate():
    pass
"""


def test_installed(killdrill_plugins):
    record = killdrill_plugins.install("acme", SOURCE, distribution="kd-acme")
    assert record.plugin == "kd-acme" and record.activate is not None
    assert "acme" in integrations.known()
    assert str(killdrill_plugins.site) in os.environ["PYTHONPATH"].split(os.pathsep)


def test_registered(killdrill_plugins):
    from killdrill.integrations import Integration

    killdrill_plugins.register(Integration("bells", activate=lambda: None))
    assert "bells" in integrations.known()


def test_gone_after():
    assert not {"acme", "bells"} & set(integrations.known())
    assert "kd_acme" not in sys.modules
'''


def test_what_a_test_installed_is_gone_after_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER)
    pytester.runpytest_inprocess().assert_outcomes(passed=3)
