"""The opt-in ``compensation_order`` check: undo operations land in reverse order of their actions."""

from __future__ import annotations

import itertools

from killdrill.providers import undo_operations
from killdrill.records import COMPENSATION_ORDER, Call, Violation
from killdrill.verdict.checks import CheckContext, check

__all__ = ["compensation_order"]


@check(COMPENSATION_ORDER, opt_in=True)
def compensation_order(ctx: CheckContext) -> list[Violation]:
    """Undo operations must land in the reverse order of the actions they undo (a Saga's rule).

    Every effect can land exactly once with the compensations in the wrong order (stock freed
    while the charge still stands), which no count can see, and the clean run has the same
    order, so this is judged on the case alone.  Opt-in: a flow that releases reservations
    first-in-first-out as ordinary business, not as compensation, would be flagged.  Which
    operation undoes which is each provider's declaration (``Operation(undoes=..., target=...)``).
    """
    case = ctx.case
    undo_ops = undo_operations()
    landed_at: dict[tuple[str, str], int] = {}
    for c in case.calls:
        if c.landed and c.effect_id is not None:
            landed_at.setdefault((c.provider, c.effect_id), c.seq)
    undos: list[tuple[Call, int]] = []  # (undo call, seq of the action it undoes)
    seen: set[tuple[str, str]] = set()
    for c in sorted(case.calls, key=lambda c: c.seq):
        spec = undo_ops.get((c.provider, c.op))
        if spec is None or not c.landed:
            continue
        (provider, _), field_name = spec
        target = c.payload.get(field_name)
        action_seq = landed_at.get((provider, str(target)))
        if action_seq is None or (provider, str(target)) in seen:
            continue
        seen.add((provider, str(target)))
        undos.append((c, action_seq))
    out: list[Violation] = []
    for (first, a1), (second, a2) in itertools.combinations(undos, 2):
        if a1 < a2:  # undone in the order done: the later action must be undone first
            out.append(
                Violation(
                    kind=COMPENSATION_ORDER,
                    message=(
                        f"{first.provider}.{first.op} (undoing the action of call #{a1}) landed before "
                        f"{second.provider}.{second.op} (undoing the later call #{a2}): compensations "
                        "must run in the reverse order of their actions"
                    ),
                    provider=first.provider,
                    op=first.op,
                    calls=(first, second),
                    detail={"undo_seqs": [first.seq, second.seq], "action_seqs": [a1, a2]},
                )
            )
    return out
