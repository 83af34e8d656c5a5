"""The whole exception tree of parley, split by who must act.

    ParleyError
    ├── CallerError              the caller sent something we refuse; it must change the request
    │   ├── InvalidRequest       400 — malformed or contradictory input
    │   │   └── UnknownKind      400 — a mail kind / channel kind we do not know
    │   ├── Unauthenticated      401 — no token, or a token we do not know
    │   ├── PermissionDenied     403 — authenticated, but not allowed to do this
    │   ├── NotFound             404 — the thing does not exist (or is not visible to the caller)
    │   ├── Conflict             409 — the state does not allow it (already completed, stale turn…)
    │   ├── TooLarge             413 — bigger than a configured size limit
    │   └── RateLimited          429 — too often; retry after `retry_after` seconds
    ├── OperatorError            the person running the hub must act
    │   ├── ConfigError          bad configuration
    │   ├── StorageError         the store failed (driver errors are chained)
    │   │   ├── StorageFull      507 — the disk holding the store is full; nothing was written
    │   │   ├── SchemaTooNew     the database was migrated by a newer parley
    │   │   └── ForeignDatabase  the database holds another application's tables
    │   └── HubAlreadyRunning    another hub holds this SQLite data root
    └── RuntimeFailure           a model/agent runtime failed to produce a turn

Every error carries a stable machine-readable ``code`` (the class default, or a more specific one
given at raise time), a message a person understands, and optional ``details``. Surfaces map the
class to a status (REST) or a tool error (MCP) and always pass the code through unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from parley.core.runtime import Usage


class ParleyError(Exception):
    """Something went wrong in parley."""

    code: ClassVar[str] = "parley_error"

    def __init__(
        self, message: str | None = None, *, code: str | None = None, **details: Any
    ) -> None:
        self.message = message or (self.__doc__ or self.__class__.__name__).strip()
        if code is not None:
            self.code = code  # type: ignore[misc]
        self.details: dict[str, Any] = details
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class CallerError(ParleyError):
    """The request was refused; change it and try again."""

    code = "refused"


class InvalidRequest(CallerError):
    """The request is malformed or contradictory."""

    code = "invalid_request"


class UnknownKind(InvalidRequest):
    """The kind given is not one parley knows."""

    code = "unknown_kind"


class Unauthenticated(CallerError):
    """A valid bearer token is required; pass it as 'Authorization: Bearer <token>'."""

    code = "unauthenticated"


class PermissionDenied(CallerError):
    """You are not allowed to do this."""

    code = "forbidden"


class NotFound(CallerError):
    """No such thing exists."""

    code = "not_found"


class Conflict(CallerError):
    """The current state does not allow this."""

    code = "conflict"


class TooLarge(CallerError):
    """The request is bigger than the hub accepts; make it smaller."""

    code = "too_large"

    def __init__(
        self, message: str | None = None, *, limit: int, size: int, **details: Any
    ) -> None:
        super().__init__(message, limit=limit, size=size, **details)
        self.limit = limit
        self.size = size


class RateLimited(CallerError):
    """Too many requests; wait and retry."""

    code = "rate_limited"

    def __init__(self, message: str | None = None, *, retry_after: float, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after


class OperatorError(ParleyError):
    """The hub cannot work as configured; the operator must act."""

    code = "operator_error"


class ConfigError(OperatorError):
    """The configuration is invalid."""

    code = "config_error"


class StorageError(OperatorError):
    """The store failed."""

    code = "storage_error"


class StorageFull(StorageError):
    """The disk holding the store is full: nothing of this request was stored. Free space and
    retry; the hub takes writes again as soon as there is room."""

    code = "storage_full"


class SchemaTooNew(StorageError):
    """The database schema is newer than this parley; upgrade parley before starting the hub."""

    code = "schema_too_new"


class ForeignDatabase(StorageError):
    """The database holds tables parley did not create; parley does not add its own beside
    another application's."""

    code = "foreign_database"


class HubAlreadyRunning(OperatorError):
    """Another hub is already running on this data root."""

    code = "hub_already_running"


FailureReason = Literal["error", "stop_reason", "empty", "timeout", "cancelled", "tool_rounds"]


class RuntimeFailure(ParleyError):
    """The agent's runtime failed to produce a turn."""

    code = "runtime_failure"

    def __init__(
        self,
        message: str | None = None,
        *,
        reason: FailureReason = "error",
        stop_reason: str | None = None,
        **details: Any,
    ) -> None:
        super().__init__(
            message, code=f"runtime_{reason}", reason=reason, stop_reason=stop_reason, **details
        )
        self.reason: FailureReason = reason
        self.stop_reason = stop_reason
        self.usage: Usage | None = None
        """What the failed turn used before it failed, when the runtime knows: a failed turn
        is paid for too."""

    def charged(self, usage: Usage) -> RuntimeFailure:
        """Attach what the turn used before failing (kept if one is already attached)."""
        if self.usage is None and usage.reported:
            self.usage = usage
        return self
