"""The fakes' errors, shaped as Stripe's (``status``, ``type``, ``code``, ``param``)."""

from __future__ import annotations

from typing import Any

from killdrill.records import Call


class FakeProviderError(Exception):
    """A fake provider refused or failed a request; ``status``/``type``/``code`` as Stripe's errors."""

    status = 400
    type = "invalid_request_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        param: str | None = None,
        call: Call | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.param = param
        self.call = call

    def to_body(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, "code": self.code, "param": self.param}}


class IdempotencyError(FakeProviderError):
    """The key was first used with another payload (or operation): nothing happened."""

    type = "idempotency_error"
    code = "idempotency_error"


class IdempotencyConflict(FakeProviderError):
    """The key's first request is still being executed (409): nothing happened, retry later."""

    status = 409
    code = "idempotency_key_in_use"


class InjectedFault(FakeProviderError):
    """A configured fault before the effect: nothing happened."""

    status = 500
    type = "api_error"
    code = "injected_fault"


class StaleFence(FakeProviderError):
    """A write carrying a fencing token lower than one the resource already saw: nothing happened."""

    status = 409
    code = "stale_fence"


class IndeterminateError(FakeProviderError):
    """A configured fault after the effect committed: it happened, the caller was not told."""

    status = 500
    type = "api_error"
    code = "indeterminate"


ERRORS_BY_NAME: dict[str, type[FakeProviderError]] = {
    c.__name__: c for c in (FakeProviderError, IdempotencyError, IdempotencyConflict, InjectedFault)
}
"""A stored error is replayed as the class it was raised as."""
