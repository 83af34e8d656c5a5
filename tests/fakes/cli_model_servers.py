"""Fake model servers in the streaming shapes the real command-line agents speak: the Messages
API with ``stream: true`` (Server-Sent Events) for Claude Code, and the Responses API for Codex
(``wire_api = "responses"``). Both answer from the same script as the other fake servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer


def _sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


async def _stream(events: list[dict[str, Any]]) -> AsyncIterator[str]:
    for event in events:
        yield _sse(event)


class FakeAnthropicStreamServer(FakeAnthropicServer):
    """The Messages API as Claude Code calls it: streamed when the request asks for it."""

    async def create(self, request: Request) -> Response:
        body = await request.json()
        if not body.get("stream"):
            # ``take`` reads the body again; Starlette caches it.
            return await super().create(request)
        reply = await self.take(request)
        if reply.status != 200:
            return self.error_response(reply)
        n = len(self.requests)
        message = {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 42, "output_tokens": 1},
        }
        events = [
            {"type": "message_start", "message": message},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": reply.text},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop or "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 7},
            },
            {"type": "message_stop"},
        ]
        return StreamingResponse(_stream(events), media_type="text/event-stream")


class FakeResponsesServer(FakeOpenAIServer):
    """``POST /v1/responses`` streamed, the wire API Codex uses for a custom provider (its base
    URL and its errors are the other OpenAI endpoints')."""

    def app(self) -> Any:
        return Starlette(routes=[Route("/v1/responses", self.create, methods=["POST"])])

    async def create(self, request: Request) -> Response:
        reply = await self.take(request)
        if reply.status != 200:
            return self.error_response(reply)
        n = len(self.requests)
        item = {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "in_progress"}
        done = {
            **item,
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
        usage = {
            "input_tokens": 42,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 49,
        }
        response = {"id": f"resp_{n}", "object": "response", "status": "in_progress"}
        events = [
            {"type": "response.created", "response": {**response, "output": []}},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "content": []},
            },
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": reply.text,
            },
            {"type": "response.output_item.done", "output_index": 0, "item": done},
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [done], "usage": usage},
            },
        ]
        return StreamingResponse(_stream(events), media_type="text/event-stream")
