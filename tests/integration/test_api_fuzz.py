"""Q6: schema-driven fuzzing of the REST API. Every operation of the OpenAPI document gets the
boundary cases of schemathesis' coverage phase and generated cases, valid and invalid, as the
operator and as an agent. No answer may be a server error; every answer must have a documented
status, content type and schema; every refusal must be our JSON error ``{code, message,
details}``.

Schemathesis generates and checks the cases; the requests reach the app in-process through
httpx on the test's own event loop, because the hub's store and writer tasks live on that loop
(schemathesis' own ASGI client runs apps on a loop of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import checks as builtin
from schemathesis.python import asgi as schemathesis_asgi

from parley.core.identity import Principal
from parley.core.mail import MAIL_KINDS
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.mail.mailbox import SendRequest
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent

BASE_URL = "http://parley.test"
# Hypothesis examples per operation, for valid and invalid cases together; with the coverage
# phase's boundary cases this keeps a run well under a minute per backend.
EXAMPLES = 30
REQUEST_TIMEOUT_S = 15.0

# Server-sent event streams never end, and httpx's in-process transport answers only once the
# app has finished a response; their refusals and Last-Event-ID handling have their own tests
# (test_mail_permissions, test_mail_stream, test_bad_input).
STREAMS = {
    "GET /v1/channels/{channel_id}/stream",
    "GET /v1/agents/{owner}/inbox/stream",
    "GET /v1/events/stream",
    "GET /v1/rooms/meetings/{meeting_id}/stream",
    "GET /v1/workers/{worker_id}/stream",
}
# Long polls are sent with ``timeout_s=0`` whenever the case asks for a real wait, so each
# answers at once; out-of-range timeouts still reach the app and must be refused.
LONG_POLLS = {"GET /v1/agents/{owner}/inbox/wait", "GET /v1/turns/next"}
MAX_WAIT_S = 300.0
# With ``rotate`` this revokes the caller's own token when the fuzzer names the caller; it runs
# last so it cannot lock the rest of the run out.
RUNS_LAST = "POST /v1/principals/{principal_id}/tokens"
# Archiving an agent revokes its tokens, and revoking one token may revoke the caller's: these
# run just before the rotation, after everything else.
RUNS_LATE = {
    "POST /v1/agents/{agent_id}/archive",
    "DELETE /v1/principals/{principal_id}/tokens/{token_id}",
}


# Schemathesis fuzz dictionaries, mixed into generated values. Hostile text is valid for a
# string schema, so it reaches the service and the store inside valid requests: NUL characters
# (PostgreSQL refuses them), text longer than the id columns, astral characters, a traversal.
HOSTILE = {
    "hostile-text": ["a\x00b", "\x00", "x" * 300, "\U0001f600" * 70, " ", "../../etc/passwd"],
    # Past the 32-bit sequence columns and the 64-bit integers of the drivers.
    "hostile-integers": [-1, 2**31, 2**63, 10**30],
    # Valid ISO-8601 at the edges of the calendar, and not a time at all.
    "hostile-times": ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "2026-13-01"],
}
HOSTILE_FIELDS = {
    "hostile-text": [
        "body.subject", "body.body", "body.content", "body.name", "body.display_name",
        "body.persona", "body.workspace", "body.reason", "body.text", "body.label",
        "body.labels[*]", "body.related[*]", "body.idempotency_key", "body.correlation_id",
        "body.discussGuide", "body.summaryPath", "body.reply_to", "query.kind", "query.from",
        "query.label", "query.status", "query.after", "query.type", "query.subject",
        "query.actor",
    ],
    "hostile-integers": [
        "body.ttl_seconds", "body.discussion_rounds", "query.after_seq", "query.latest",
        "query.limit",
    ],
    "hostile-times": ["query.since"],
}  # fmt: skip
# Fields that name objects, bound to the dictionary of the objects that exist.
KNOWN_FIELDS = {
    "path.agent_id": "principals",
    "path.owner": "principals",
    "path.principal_id": "principals",
    "path.human_id": "principals",
    "path.channel_id": "channels",
    "path.message_id": "messages",
    "path.task_id": "tasks",
    "path.turn_id": "turns",
    "body.to": "addresses",
    "body.kind": "kinds",
    "body.cc[*]": "principals",
    "body.members[*]": "principals",
    "body.parent_message_id": "messages",
    "body.callbackChannelId": "channels",
    "body.status": "statuses",
}
HOSTILE_RATE = 0.2
KNOWN_RATE = 0.7


@dataclass
class World:
    """Objects that exist before fuzzing. Path parameters and body fields often name them, so
    that a valid request gets past the lookups to the service and the store."""

    tokens: dict[str, str]
    known: dict[str, list[str]]

    def schemathesis_config(self) -> schemathesis.Config:
        """Fuzz dictionaries of known and hostile values; one hostile entry per known set, so
        that lookups also meet a NUL character."""
        known = {name: [*values, "a\x00b"] for name, values in self.known.items()}
        bindings = {
            **{key: (name, KNOWN_RATE) for key, name in KNOWN_FIELDS.items()},
            **{key: (name, HOSTILE_RATE) for name, keys in HOSTILE_FIELDS.items() for key in keys},
        }
        return schemathesis.Config.from_dict(
            {
                "dictionaries": {
                    name: {"values": values} for name, values in {**HOSTILE, **known}.items()
                },
                "parameters": {
                    key: {"dictionary": name, "probability": rate}
                    for key, (name, rate) in bindings.items()
                },
                "generation": {
                    # Negative cases break the request, not the credentials: missing and bad
                    # tokens have their own refusal tests (test_mail_permissions).
                    "with-security-parameters": False,
                },
            }
        )


@pytest.fixture
async def world(hub: Hub, operator: Principal, make_agent: MakeAgent) -> World:
    # alice answers turns remotely, so a post in the group leaves her a real pending turn.
    alice = await make_agent("alice", runtime={"kind": "remote"})
    bob = await make_agent("bob")
    group = await hub.channels.create(
        operator, ChannelSpec(name="fuzz-group", members=["alice"], discussion_rounds=1)
    )
    posted = await hub.channels.post(operator, group.id, "what do you think?")
    turn = await hub.turns.next(alice.principal, timeout_s=15)
    assert turn is not None, "alice was offered no turn"
    sent = await hub.mail.send(
        alice.principal, SendRequest(to="bob", kind="task", subject="fuzz", body="hello")
    )
    principals = ["alice", "bob", "operator"]
    assert hub.operator_token is not None
    return World(
        tokens={"operator": hub.operator_token, "agent": alice.token},
        known={
            "principals": principals,
            "channels": [group.id, alice.principal.work_channel_id or "", bob.id],
            "messages": [sent.message.id],
            "tasks": [posted.task_id or ""],
            "turns": [turn.id],
            "addresses": [*principals, f"channel:{group.id}", "*"],
            "kinds": list(MAIL_KINDS),
            "statuses": ["read", "in_progress", "closed"],
        },
    )


def has_error_shape(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> None:
    """Every refusal is our JSON error: a string ``code`` and ``message``, and ``details``."""
    if not 400 <= response.status_code < 500:
        return
    try:
        body = response.json()
    except ValueError:
        raise AssertionError(
            f"{response.status_code} body is not JSON: {response.text!r}"
        ) from None
    assert isinstance(body, dict), f"{response.status_code} body is not an object: {body!r}"
    assert isinstance(body.get("code"), str) and body["code"], f"no string code: {body!r}"
    assert isinstance(body.get("message"), str) and body["message"], f"no message: {body!r}"
    assert isinstance(body.get("details"), dict), f"no details object: {body!r}"


CHECKS = [
    builtin.not_a_server_error,
    builtin.status_code_conformance,
    builtin.content_type_conformance,
    builtin.response_schema_conformance,
    has_error_shape,
]


def _no_wait(value: Any) -> Any:
    try:
        wait = float(value)
    except (TypeError, ValueError):
        return value
    return 0 if 0 < wait <= MAX_WAIT_S else value


def without_waiting(case: schemathesis.Case) -> schemathesis.Case:
    """Ask a long poll for an immediate answer where the case would make it really wait: a
    timeout in range, a repeated parameter (the app reads the last) or none (30 s)."""
    if case.operation.label in LONG_POLLS:
        value = case.query.get("timeout_s", 30.0)
        waits = [_no_wait(v) for v in value] if isinstance(value, list) else _no_wait(value)
        case.query = {**case.query, "timeout_s": waits}
    return case


def generated_cases(operation: Any) -> st.SearchStrategy[Any]:
    """Valid and invalid cases, with the fuzz dictionaries of the schema's config mixed in."""
    modes = [operation.as_strategy(mode) for mode in schemathesis.GenerationMode]
    return st.one_of(modes).map(without_waiting)


def coverage_cases(schema: Any, operation: Any) -> Iterator[schemathesis.Case]:
    """Schemathesis' coverage phase: boundary values, missing and mistyped parameters."""
    config = schema.config.generation_for(operation=operation, phase="coverage")
    for case in schema.iter_coverage_cases(
        operation, generation_modes=list(schemathesis.GenerationMode), generation_config=config
    ):
        yield without_waiting(case)


def fuzz_operation(schema: Any, operation: Any, send: Callable[..., Any]) -> None:
    def check(case: schemathesis.Case) -> None:
        case.validate_response(send(case), checks=CHECKS)

    for case in coverage_cases(schema, operation):
        check(case)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=generated_cases(operation))
    def fuzz(case: schemathesis.Case) -> None:
        check(case)

    fuzz()


@pytest.mark.parametrize("caller", ["operator", "agent"])
async def test_fuzzed_requests_get_no_server_error_and_json_refusals(
    hub: Hub, world: World, caller: str
) -> None:
    app = create_app(hub=hub)
    try:
        schema = schemathesis.openapi.from_asgi(
            "/openapi.json", app, config=world.schemathesis_config()
        )
    finally:
        # Loading ran the app's lifespan on schemathesis' own loop; end it there, as the cases
        # go through httpx on this loop and need none.
        schemathesis_asgi.shutdown_lifespans()
    auth = {"Authorization": f"Bearer {world.tokens[caller]}"}
    loop = asyncio.get_running_loop()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)

    def send(case: schemathesis.Case) -> httpx.Response:
        """Send a case from the fuzzing thread through the test's loop."""
        kwargs = case.as_transport_kwargs(base_url=BASE_URL, headers=auth)
        prepared = requests.Request(
            method=kwargs["method"],
            url=kwargs["url"],
            headers=kwargs["headers"],
            params=kwargs.get("params"),
            cookies=kwargs.get("cookies"),
            json=kwargs.get("json"),
            data=kwargs.get("data"),
            files=kwargs.get("files"),
        ).prepare()
        request = client.request(
            prepared.method or "GET",
            prepared.url or "",
            headers=dict(prepared.headers),
            content=prepared.body,
        )
        answer = asyncio.run_coroutine_threadsafe(request, loop)
        try:
            return answer.result(REQUEST_TIMEOUT_S)
        except Exception as exc:  # the app raised, or hung, instead of answering
            answer.cancel()
            raise AssertionError(
                f"the app raised {exc!r} for\n    {case.as_curl_command()}"
            ) from exc

    operations = [
        result.ok() for result in schema.get_all_operations() if result.ok().label not in STREAMS
    ]
    operations.sort(key=lambda op: (op.label == RUNS_LAST, op.label in RUNS_LATE))
    failures: list[str] = []

    def fuzz_all() -> None:
        for operation in operations:
            try:
                fuzz_operation(schema, operation, send)
            except (Exception, BaseExceptionGroup) as exc:
                failures.append(f"{operation.label}: {exc}")

    try:
        await asyncio.to_thread(fuzz_all)
    finally:
        await client.aclose()
    assert not failures, f"{len(failures)} operations failed:\n\n" + "\n\n".join(failures)
