"""Bundled example agents: correct forms, and planted defects behind flags.

``SETTLEMENT`` is the drill command of the five-node settlement agent, as in the README
(``python`` there means the interpreter running killdrill).
"""

SETTLEMENT = (
    "python",
    "-m",
    "killdrill.examples.settlement",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
)
