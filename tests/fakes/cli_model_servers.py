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
        ]
        for i, call in enumerate(reply.calls, 1):
            # A tool call streams as a tool_use block whose input arrives as JSON deltas.
            use = {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": call.name, "input": {}}
            events += [
                {"type": "content_block_start", "index": i, "content_block": use},
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(call.arguments),
                    },
                },
                {"type": "content_block_stop", "index": i},
            ]
        stop = reply.stop or ("tool_use" if reply.calls else "end_turn")
        events += [
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
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
        if reply.calls:
            return StreamingResponse(
                _stream(self._calls(n, reply, response, usage)), media_type="text/event-stream"
            )
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

    def _calls(
        self, n: int, reply: Any, response: dict[str, Any], usage: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """A response whose output is function calls (their arguments streamed as deltas)."""
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "output": []}}
        ]
        done_items = []
        for i, call in enumerate(reply.calls):
            arguments = json.dumps(call.arguments)
            item = {
                "id": f"fc_{n}_{i}",
                "type": "function_call",
                "status": "in_progress",
                "call_id": f"call_{n}_{i}",
                "name": call.name,
                "arguments": "",
            }
            if call.namespace is not None:
                item["namespace"] = call.namespace
            done = {**item, "status": "completed", "arguments": arguments}
            done_items.append(done)
            events += [
                {"type": "response.output_item.added", "output_index": i, "item": item},
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": i,
                    "delta": arguments,
                },
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": i,
                    "arguments": arguments,
                },
                {"type": "response.output_item.done", "output_index": i, "item": done},
            ]
        completed = {**response, "status": "completed", "output": done_items, "usage": usage}
        events.append({"type": "response.completed", "response": completed})
        return events
