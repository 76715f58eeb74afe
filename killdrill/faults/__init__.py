"""Faults other than a kill (Jepsen's nemesis): what a drill does to an agent besides SIGKILL.

``fleet``: the zombie worker (``pause:POINT``) and the upgrade (``--resume-with``);
``resumers``: concurrent resumers released in lockstep at a barrier; ``network``: connection
faults (``drop:``/``reset:``) drawn by chaos. May import: ``process``, ``points``, ``records``,
``errors``.
"""
