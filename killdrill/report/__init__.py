"""Reports of a drill: text for a person woken at 3 a.m. (``drill``), JSON for machines, and a
self-contained HTML page (``html``). May import: ``verdict``, ``records``, ``points``, ``errors``.
"""
