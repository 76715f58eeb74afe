"""Faults (Jepsen's nemesis): what a drill does to an agent, one file a kind.

A schedule's fault (``points.Fault``) is acted out by a nemesis (``process.nemesis.Nemesis``, the
protocol the supervisor routes to): ``kill`` (at a point, a delay after it, a time), ``hold``,
``pause`` (the zombie worker), ``connection`` (``drop:``/``reset:`` at the HTTP fakes), and any kind
of ``points.GRAMMAR`` (``KIND[=TARGET]:TRIGGER``); ``resumers``: the barrier of concurrent resumers.
``kinds``: the table of kinds and a step's launches; ``plan``: what each step of a case launches;
``aimed``: the faults a deployment lands as it runs; ``fleet`` and ``network``: what chaos draws
(pauses, the upgrade, connection faults).  May import: ``process``, ``fakes``, ``points``,
``options``, ``records``, ``registry``, ``errors``.
"""
