"""A fake OpenAI-compatible server: ``POST /v1/chat/completions`` in the Chat Completions shape,
tool calls included."""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.model_server import FakeModelServer, FakeReply


class FakeOpenAIServer(FakeModelServer):
    """Answers chat completions from its script; ``base_url`` ends in ``/v1`` like OpenAI's."""

    def app(self) -> Any:
        return Starlette(routes=[Route("/v1/chat/completions", self.complete, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @staticmethod
    def error_response(reply: FakeReply) -> JSONResponse:
        """A scripted HTTP error, in the shape every OpenAI endpoint answers errors with."""
        return JSONResponse(
            {"error": {"message": reply.error_message, "type": "server_error", "code": None}},
            status_code=reply.status,
            headers=reply.headers,
        )

    async def complete(self, request: Request) -> JSONResponse:
        reply = await self.take(request)
        sent = self.requests[-1]
        if reply.status != 200:
            return self.error_response(reply)
        n = len(self.requests)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for i, c in enumerate(reply.calls)
            ]
        stop = reply.stop or ("tool_calls" if reply.calls else "stop")
        return JSONResponse(
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": sent.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": stop,
                        "logprobs": None,
                    }
                ],
                "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
            },
            headers=reply.headers,
        )
