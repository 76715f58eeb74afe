"""The probe agents of ``killdrill conform``: one module per framework, written as its users write
code, each the same three steps (``reserve`` -> ``charge`` -> ``notify``) with effects keyed as the
framework's documentation recommends, plus an interrupt form where the framework has interrupts.

Agents (users' code), not a layer: they import the framework and ``killdrill.fakes`` only.
``_common`` holds their shared command line (``--thread``, ``--workdir``, ``--fork-of``).
"""
