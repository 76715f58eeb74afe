"""``killdrill conform``: the resume contract of agent frameworks, as a table anyone can regenerate.

Six properties of checkpoint/interrupt/resume ("Resume Means Resume", arXiv:2608.03836), each
observed by ordinary drills (:class:`killdrill.drill.Drill`: discovery, ``run_case``, the ledger and
the attempts' traces) of a bundled probe agent per framework (``probes/``): ``frameworks`` says
what each framework's probe is and where its step is committed, ``properties`` runs the drills
and reads them, ``table`` renders text, JSON and Markdown.

Layer: beside ``chaos``, above ``drill``; may import drill and everything below it, never chaos or
a front end (``cli`` calls it).  ``probes/`` are agents (users' code): they import a framework and
``killdrill.fakes`` only, and this ``__init__`` imports nothing, so an agent stays cheap to start.
"""
