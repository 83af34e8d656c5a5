"""A fake Anthropic server: ``POST /v1/messages`` in the Messages API shape, tool use included."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.model_server import FakeModelServer, FakeReply


class FakeAnthropicServer(FakeModelServer):
    """Answers messages from its script; ``base_url`` is the bare origin like Anthropic's."""

    def app(self) -> Any:
        return Starlette(routes=[Route("/v1/messages", self.create, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return self.url

    @staticmethod
    def error_response(reply: FakeReply) -> JSONResponse:
        """A scripted HTTP error, in the Messages API's error shape (streamed or not)."""
        return JSONResponse(
            {"type": "error", "error": {"type": "api_error", "message": reply.error_message}},
            status_code=reply.status,
            headers=reply.headers,
        )

    async def create(self, request: Request) -> Response:
        reply = await self.take(request)
        sent = self.requests[-1]
        if reply.status != 200:
            return self.error_response(reply)
        n = len(self.requests)
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [
            {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": c.name, "input": c.arguments}
            for i, c in enumerate(reply.calls)
        ]
        return JSONResponse(
            {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": sent.get("model", "fake"),
                "content": content,
                "stop_reason": reply.stop or ("tool_use" if reply.calls else "end_turn"),
                "stop_sequence": None,
                "usage": {"input_tokens": 42, "output_tokens": 7},
            },
            headers=reply.headers,
        )
