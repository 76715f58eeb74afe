"""Spawns a child and a daemonized grandchild (new session), records their pids, then works.

Used to prove that a kill leaves no survivor anywhere in the tree.
"""

import os
import subprocess
import sys
import time

import killdrill

pids_file = sys.argv[1]
sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
child = subprocess.Popen(sleeper)
escapee = subprocess.Popen(sleeper, start_new_session=True)  # leaves the process group
with open(pids_file, "a") as f:
    f.write(f"{os.getpid()} {child.pid} {escapee.pid}\n")
with killdrill.node("work"):
    time.sleep(0.05)
child.kill()
escapee.kill()
