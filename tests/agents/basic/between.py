"""A between-attempts command: logs the attempt about to start, or fails when told to."""

import os
import sys

if sys.argv[2:] == ["fail"]:
    print("reconciliation failed on purpose", file=sys.stderr)
    sys.exit(4)
with open(sys.argv[1], "a") as f:
    f.write(f"before attempt {os.environ['KILLDRILL_ATTEMPT']} of {os.environ['KILLDRILL_THREAD']}\n")
