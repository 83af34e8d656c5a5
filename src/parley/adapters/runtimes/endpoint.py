"""Per-agent settings shared by the HTTP model runtimes (OpenAI-compatible and Anthropic)."""

from __future__ import annotations

import os
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parley.core.errors import ConfigError, InvalidRequest

C = TypeVar("C", bound=BaseModel)


class EndpointConfig(BaseModel):
    """Where and how to call a model: base URL, model, key, sampling and limits."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    """The name of an environment variable holding the key, so the key stays out of the store."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    timeout_s: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    max_retries: int = Field(default=2, ge=0, le=10)
    """Retries the SDK makes on 408/409/429/5xx and connection errors, within the deadline."""

    def resolve_api_key(self, kind: str, default_env: str) -> str:
        """The key from the config, else from ``api_key_env``, else from ``default_env``."""
        if self.api_key:
            return self.api_key
        name = self.api_key_env or default_env
        value = os.environ.get(name)
        if value:
            return value
        raise ConfigError(
            f"the {kind} runtime for model {self.model!r} has no API key: set 'api_key' or "
            f"'api_key_env' in the agent's runtime config, or export {name}",
            code="missing_api_key",
        )


def parse_config(model: type[C], config: dict[str, Any]) -> C:
    """Validate a runtime config dict (its ``kind`` aside), turning pydantic's complaints into
    one clear refusal."""
    try:
        return model.model_validate({k: v for k, v in config.items() if k != "kind"})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(config)'}: {err['msg']}"
            for err in exc.errors()
        )
        kind = config.get("kind")
        raise InvalidRequest(
            f"runtime config for kind {kind!r} is invalid: {problems}; "
            "fix the agent's runtime settings",
            code="invalid_runtime_config",
        ) from exc
