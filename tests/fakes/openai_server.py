"""A fake OpenAI-compatible server: ``POST /v1/chat/completions`` in the Chat Completions shape."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.model_server import FakeModelServer


class FakeOpenAIServer(FakeModelServer):
    """Answers chat completions from its script; ``base_url`` ends in ``/v1`` like OpenAI's."""

    def app(self) -> Any:
        return Starlette(routes=[Route("/v1/chat/completions", self.complete, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    async def complete(self, request: Request) -> JSONResponse:
        reply = await self.take(request)
        sent = self.requests[-1]
        if reply.status != 200:
            return JSONResponse(
                {"error": {"message": reply.error_message, "type": "server_error", "code": None}},
                status_code=reply.status,
                headers=reply.headers,
            )
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": sent.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply.text},
                        "finish_reason": reply.stop or "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
            },
            headers=reply.headers,
        )
