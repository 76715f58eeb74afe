"""Processes: how an attempt is started, watched, answered at its boundaries and killed.

The control channel (``control``), containment of a whole process tree (``containment``), the
fork templates and their keepers (``template``, the process; ``forks``, the harness's client of
it), SIGINT/SIGTERM as one exception (``interrupts``), and the supervisor's event loop
(``supervisor``, with ``attempts`` and ``reaping``). May import: ``errors``, ``points``,
``records``. Imports nothing here eagerly: ``python -m killdrill.process.template`` starts small.
"""
