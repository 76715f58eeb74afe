"""CrewAI's scripted human (``--answer``): a flow method decorated with ``@human_feedback`` (no
provider: CrewAI asks on the console) gets the next answer as the person's feedback text.

Part of :mod:`killdrill.integrations.crewai`, which wraps ``Flow._request_human_feedback`` (the
console prompt, ``input("Your feedback: ")``) with :func:`wrap_request` when the drill gave
answers; CrewAI then goes on as with a typed answer (the feedback is stored, collapsed to an
outcome when the decorator has ``emit``).  The question's identity across kills is the flow's
state id, the method and its rank among this run's questions for that method: CrewAI resumes a
persisted flow (``kickoff(inputs={"id": ...})``) by running every method again, so a resumed run
asks the questions again, in the same order, and each gets the answer it got before
(:mod:`killdrill.integrations._answers`).  A feedback provider of the user's own (a Slack
approval, ``HumanFeedbackPending``) is not answered; a question with no answer left reaches the
console prompt, and the agent's stderr says which one.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from killdrill.integrations import _answers

__all__ = ["wrap_request"]

_lock = threading.Lock()
_asked: dict[tuple[int, str], int] = {}  # (flow object id, method) -> questions asked this run


def wrap_request(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        method = str(kwargs.get("method_name", ""))
        with _lock:
            rank = _asked.get((id(self), method), 0) + 1
            _asked[(id(self), method)] = rank
        key = f"crewai:{getattr(self, 'flow_id', None)}:{method}:{rank}"
        values = _answers.answers_for([key])
        if values is None:
            _answers.none_left("crewai", f"@human_feedback of {method} asks")
            return orig(self, *args, **kwargs)
        value = values[0]
        return value if isinstance(value, str) else str(value)

    return request
