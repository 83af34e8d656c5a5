"""Redaction of runtime configs and free text (Q8): what is hidden, and what is left alone."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.core.redact import (
    REDACTED,
    is_secret_name,
    redact_config,
    redact_text,
    scrub,
    secret_values,
)

SECRET_NAMES = (
    "api_key",
    "token",
    "client_secret",
    "password",
    "key",
    "apiKey",
    "accessToken",
    "X-Api-Key",
    "Authorization",
    "APIKEY",
    "credentials",
    "basic_auth",
    "Cookie",
)
PLAIN_NAMES = ("max_tokens", "maxTokens", "api_key_env", "model", "base_url", "env", "tokens", "")


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


def test_config_hides_env_nested_keys_flags_and_userinfo() -> None:
    config = {
        "kind": "command",
        "argv": ["run", "--api-key", "flag-secret", "--token=eq-secret", "--model", "m"],
        "env": {"ANTHROPIC_API_KEY": "env-secret", "HOME": "/home/x"},
        "base_url": "http://svcuser:url-secret@127.0.0.1:9/v1",
        "nested": {"auth": {"user": "u", "pass": "p"}, "headers": {"Authorization": "Bearer b"}},
        "max_tokens": 5,
        "api_key_env": "OPENAI_API_KEY",
        "api_key": None,
    }
    assert redact_config(config) == {
        "kind": "command",
        "argv": ["run", "--api-key", REDACTED, f"--token={REDACTED}", "--model", "m"],
        "env": {"ANTHROPIC_API_KEY": REDACTED, "HOME": REDACTED},
        "base_url": f"http://{REDACTED}@127.0.0.1:9/v1",
        "nested": {"auth": REDACTED, "headers": {"Authorization": REDACTED}},
        "max_tokens": 5,
        "api_key_env": "OPENAI_API_KEY",
        "api_key": None,
    }
    assert config["env"] == {"ANTHROPIC_API_KEY": "env-secret", "HOME": "/home/x"}  # a copy


def test_env_as_a_list_keeps_names() -> None:
    assert redact_config({"env": ["A=1", "B"]}) == {"env": [f"A={REDACTED}", REDACTED]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://svcuser:hunter2@host:80/v1", "http://***@host:80/v1"),
        ("postgresql://u:p@ss@db/parley", "postgresql://***@db/parley"),
        (
            "GET /v1/events/stream?token=pt_abcdefgh12&last_id=3",
            "GET /v1/events/stream?token=***&last_id=3",
        ),
        ("Authorization: Bearer abc.def-ghi", "Authorization: ***"),
        ("sent Bearer abcdefgh", "sent Bearer ***"),
        ("{'api_key': 'a b c', 'max_tokens': 5}", "{'api_key': '***', 'max_tokens': 5}"),
        ('{"password": "x", "model": "m"}', '{"password": "***", "model": "m"}'),
        ("[(b'authorization', b'Basic xyz')]", "[(b'authorization', b'***')]"),
        ("X-Api-Key: abc123", "X-Api-Key: ***"),
        ("OPENAI_API_KEY=sk-proj-1 run --api-key abc", "OPENAI_API_KEY=*** run --api-key ***"),
        ("token pt_0123456789abcdef leaked", "token pt_*** leaked"),
        ("Incorrect API key provided: sk-ant-0123456789", "Incorrect API key provided: sk-***"),
    ],
)
def test_text_redaction(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "the openai runtime has no API key: set 'api_key' or 'api_key_env', or export OPENAI_KEY",
        "runtime config for kind 'openai' is invalid: api_key: Input should be a valid string",
        "task-dispatch to opt_something_long at http://127.0.0.1:8765/v1 max_tokens=5",
        "pass it as 'Authorization: Bearer <token>'",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_secret_values_and_scrub() -> None:
    config = {
        "env": {"K": "env-secret"},
        "base_url": "http://user:url-secret@h/v1",
        "api_key": "key-secret",
        "argv": ["x", "--password", "flag-secret"],
        "model": "m",
    }
    found = secret_values(config)
    assert {"env-secret", "url-secret", "key-secret", "flag-secret"} <= found
    assert "m" not in found and "h" not in found
    text = "failed: key-secret env-secret url-secret flag-secret"
    assert scrub(text, found) == "failed: *** *** *** ***"


_SECRET = st.text(string.ascii_letters + string.digits + "-_.~", min_size=8, max_size=40)
_KEY = st.sampled_from(SECRET_NAMES)


@given(secret=_SECRET, key=_KEY, depth=st.integers(0, 3))
def test_no_planted_secret_survives_config_redaction(secret: str, key: str, depth: int) -> None:
    """Wherever a secret sits (under env, under a secret-like key at any depth, as URL
    userinfo), the redacted config's text does not contain it."""
    nested: dict[str, object] = {key: secret}
    for level in range(depth):
        nested = {f"level{level}": nested}
    config = {
        "kind": "command",
        "env": {"ANY": secret},
        "nested": nested,
        "base_url": f"https://svc:{secret}@example.test/v1",
        "urls": [f"http://{secret}@example.test"],
    }
    assert secret not in repr(redact_config(config))
    assert secret not in scrub(f"echo {secret}!", secret_values(config))


@given(secret=_SECRET, key=_KEY)
def test_no_secret_survives_text_redaction(secret: str, key: str) -> None:
    for template in (
        "http://user:<s>@host/x",
        "/v1/events/stream?<k>=<s>&x=1",
        '{"<k>": "<s>"}',
        "Authorization: Bearer <s>",
    ):
        text = template.replace("<k>", key).replace("<s>", secret)
        once = redact_text(text)
        # A secret that is also a piece of the text around it (``Authoriz``) stays there.
        around = template.replace("<k>", key).replace("<s>", "")
        assert once.count(secret) <= around.count(secret), text
        assert redact_text(once) == once  # idempotent: a record may pass two handlers


@given(st.text(string.ascii_letters + string.digits + "-_", min_size=8, max_size=43))
def test_no_parley_token_survives(tail: str) -> None:
    assert tail not in redact_text(f"the token pt_{tail} was sent")
