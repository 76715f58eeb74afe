"""Reaches a boundary, then hangs forever in attempts after the first kill (a stuck resume)."""

import os
import time

import killdrill

killdrill.boundary("before:work")
if os.environ.get("KILLDRILL_ATTEMPT", "1") != "1" or os.environ.get("HANG_ALWAYS"):
    time.sleep(3600)
killdrill.boundary("after:work")
