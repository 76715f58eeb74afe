"""The pytest plugin's own ``--killdrill-*`` flags (its drill options are the core table's ini keys,
``killdrill.options.OPTIONS``)."""

from __future__ import annotations

from typing import Any

from killdrill.options import Option
from killdrill.options.kinds import Flag, Kind, Number, Text

__all__ = ["PLUGIN_OPTIONS"]


def _plugin(field: str, kind: Kind, default: Any, help: str) -> Option:
    return Option(f"killdrill_{field}", kind, default, help, ini_key=False, reproduce=False)


PLUGIN_OPTIONS: tuple[Option, ...] = (
    _plugin(
        "point",
        Text(metavar="SCHEDULE"),
        None,
        "run each kill_point test with only this schedule (listed or not): the reproduction path",
    ),
    _plugin(
        "random",
        Number(int, 0, "a whole number >= 0", metavar="N"),
        0,
        "add N random schedules per drill test (needs discover= or command= in the marker)",
    ),
    _plugin(
        "seed",
        Number(int, None, "a whole number", metavar="S"),
        None,
        "seed of the random schedules (printed)",
    ),
    _plugin(
        "regressions",
        Text(metavar="PATH"),
        None,
        "replay the recorded failing schedules of a JSON corpus for tests whose command matches",
    ),
    _plugin(
        "workers",
        Number(int, 1, "a whole number >= 1", metavar="N"),
        None,
        "run N cases of a drill test at once in this pytest process (the ini key killdrill_workers,"
        " the marker's workers=; under -n each worker runs its cases one at a time)",
    ),
    _plugin("keep", Flag(), False, "keep the workdirs of passing cases too"),
    _plugin("json", Text(metavar="DIR"), None, "write each drill test's cases as JSON into DIR"),
    _plugin("rediscover", Flag(), False, "ignore cached discoveries and run them again"),
)
"""The pytest plugin's own ``--killdrill-*`` flags (its drill options are ``OPTIONS``' ini keys)."""
