"""Hypothesis profiles for the chaos job: ``nightly`` searches wide, ``ci`` is small and repeatable.

Select with ``HYPOTHESIS_PROFILE=nightly`` (the default here is ``ci``).  The run counts of
``killdrill chaos`` in test_nightly_chaos.py follow the profile too.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "nightly",
    max_examples=200,
    derandomize=False,  # a new part of the space every night; failures go to the corpus
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "ci",
    max_examples=10,
    derandomize=True,  # the same few schedules on every push: no surprise red builds
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
