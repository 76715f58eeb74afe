"""Reaches before:rare only on the first attempt: a kill scheduled there for attempt 2 is unreachable."""

import os

import killdrill

if os.environ.get("KILLDRILL_ATTEMPT") == "1":
    killdrill.boundary("before:rare")
killdrill.boundary("before:common")
