"""Processes: how an attempt is started, watched, answered at its boundaries and killed.

The control channel (``control``), containment of a whole process tree (``containment``), the
fork template and its keepers (``template``, ``launcher``), SIGINT/SIGTERM as one exception
(``interrupts``), and the supervisor's event loop (``supervisor``, with ``attempts`` and
``reaping``). May import: ``errors``, ``points``, ``records``. Imports nothing here eagerly:
``python -m killdrill.process.template`` starts small.
"""
