"""A fake Anthropic server: ``POST /v1/messages`` in the Messages API shape."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.model_server import FakeModelServer


class FakeAnthropicServer(FakeModelServer):
    """Answers messages from its script; ``base_url`` is the bare origin like Anthropic's."""

    def app(self) -> Any:
        return Starlette(routes=[Route("/v1/messages", self.create, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return self.url

    async def create(self, request: Request) -> JSONResponse:
        reply = await self.take(request)
        sent = self.requests[-1]
        if reply.status != 200:
            return JSONResponse(
                {"type": "error", "error": {"type": "api_error", "message": reply.error_message}},
                status_code=reply.status,
                headers=reply.headers,
            )
        content = [{"type": "text", "text": reply.text}] if reply.text else []
        return JSONResponse(
            {
                "id": f"msg_{len(self.requests)}",
                "type": "message",
                "role": "assistant",
                "model": sent.get("model", "fake"),
                "content": content,
                "stop_reason": reply.stop or "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 42, "output_tokens": 7},
            },
            headers=reply.headers,
        )
