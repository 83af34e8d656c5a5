"""Secrets kept out of sight: an agent's runtime config and free text, redacted before anyone
but the hub itself reads them (Q8).

A runtime config holds credentials in three shapes: every value under ``env`` (a command's
environment), any value under a secret-like key at any depth (``api_key``, ``Authorization``,
``client_secret``), and userinfo in a URL (``http://user:pass@host``). Free text (errors, log
lines) may carry the same, plus ``token=…`` query values, bearer tokens and parley tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "***"

# The last word of a key's name decides: ``api_key`` and ``X-Api-Key`` are secrets,
# ``max_tokens`` and ``api_key_env`` (the name of a variable, not its value) are not.
_SECRET_WORDS = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "credential",
        "credentials",
        "authorization",
        "auth",
        "cookie",
    }
)
_WORD_BREAK = re.compile(r"[_\-\s.]+|(?<=[a-z0-9])(?=[A-Z])")
# Shortest value scrubbed literally from text: shorter ones would redact ordinary words.
_MIN_LITERAL = 4

_URL_USERINFO = re.compile(
    r"(?P<scheme>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://)[^/?#\s'\"<>]*@"
)
_URL_USERINFO_PART = re.compile(r"://(?P<userinfo>[^/?#\s'\"<>]*)@")
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Basic|Token|Digest)\s+[A-Za-z0-9._~+/=-]{4,}")
_KNOWN_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?P<prefix>pt_|sk-)[A-Za-z0-9_-]{8,}")
# A Discord bot token (its header says "Bot <token>", no scheme word above): three base64url
# parts, the user id, a timestamp and an HMAC, joined by dots.
_DISCORD_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{20,40}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}"
)
_SCHEME_WORD = r"(?:Bearer|Basic|Token|Digest)\s+"
_PLAIN_VALUE = r"[^\s\"'&,;<>(){}\[\]]+"
# A credential after its scheme word, or a plain value that is not a scheme word (so the prose
# "Authorization: Bearer <token>" is left whole).
_BARE_VALUE = rf"(?:{_SCHEME_WORD}{_PLAIN_VALUE}|(?!{_SCHEME_WORD}){_PLAIN_VALUE})"
_VALUE = rf"(?:(?P<vq>[\"'])(?P<quoted>[^\"'\n]*)(?P=vq)|{_BARE_VALUE})"
# Every name-like group starts only where a name cannot continue (a lookbehind, not ``\b``) and
# is bounded in length: otherwise a failed match is retried from each character of a long run
# and scans to its end, quadratic in a long log line (a 16 kB run took seconds per line).
# ``name=value`` (queries, environments, command lines), ``"name": "value"`` (JSON, reprs) and
# ``("name", "value")`` (header lists).
_ASSIGNED = re.compile(
    r"(?P<lead>(?P<q>[\"']?)(?P<name>(?<![A-Za-z0-9_.])[A-Za-z_][A-Za-z0-9_.-]{0,63})(?P=q)"
    r"(?:\s*=\s*|(?<=[\"'])\s*[:,]\s*b?))"
    rf"{_VALUE}"
)
# ``--api-key value`` on a command line (``--api-key=value`` is a ``name=value`` pair).
_FLAG = re.compile(
    r"(?P<lead>(?<![\w-])--?(?P<name>[A-Za-z][A-Za-z0-9_-]*)[ \t]+)(?P<value>[^\s\-]\S*)"
)
# ``X-Api-Key: value`` or ``Authorization: Basic …`` as in headers. A name without a hyphen
# before a colon is often prose or a validation message ("api_key: Input should be…"), so only
# header-shaped names count here.
_HEADER = re.compile(
    r"(?P<lead>(?<![A-Za-z-])"
    r"(?P<name>[A-Za-z]{1,40}(?:-[A-Za-z]{1,40}){1,7}|Authorization|Cookie):[ \t]*)"
    rf"{_VALUE}",
    re.IGNORECASE,
)

# What each pattern above cannot match without: ``@`` (userinfo), a scheme word, ``=`` or a quote
# (assignments), ``:`` (headers), ``-`` (flags, ``sk-``) or ``pt_``. Most log lines and messages
# have none of it and skip the patterns, which logging runs on every record.
_MAY_HOLD_SECRET = re.compile(r"[@=:'\"-]|pt_|Bearer|Basic|Token|Digest|\.[A-Za-z0-9_-]{6}\.")


def is_secret_name(name: str) -> bool:
    """Whether a setting named ``name`` holds a credential: ``api_key``, ``token``,
    ``client_secret``, ``Authorization``, ``apiKey``… but not ``max_tokens`` or
    ``api_key_env``."""
    words = [w for w in _WORD_BREAK.split(name.strip()) if w]
    return bool(words) and words[-1].lower() in _SECRET_WORDS


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a runtime config with every secret replaced by ``***``: values under ``env``,
    values of secret-like keys at any depth, secret-like flags' values in argument lists, and
    URL userinfo and token-shaped text in every string."""
    return {str(k): _redact_entry(str(k), v) for k, v in config.items()}


def redact_text(text: str) -> str:
    """``text`` with URL userinfo, secret-like ``name=value`` pairs, ``Bearer …`` credentials
    and parley or provider tokens (``pt_…``, ``sk-…``) replaced by ``***``."""
    if not _MAY_HOLD_SECRET.search(text):
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m['scheme']} {REDACTED}", text)
    text = _ASSIGNED.sub(_redact_pair, text)
    text = _HEADER.sub(_redact_pair, text)
    text = _FLAG.sub(_redact_pair, text)
    text = _DISCORD_TOKEN.sub(REDACTED, text)
    return _KNOWN_TOKEN.sub(lambda m: f"{m['prefix']}{REDACTED}", text)


def secret_values(config: Mapping[str, Any]) -> set[str]:
    """Every secret string a runtime config holds (what :func:`redact_config` hides), so text
    a runtime produced (a provider's error, a command's stderr) can be scrubbed of them."""
    found: set[str] = set()
    _collect(config, found, secret=False)
    return {v for v in found if len(v) >= _MIN_LITERAL}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``***`` (longest first, so a secret that
    contains another goes whole), then :func:`redact_text`."""
    for value in sorted(set(secrets), key=len, reverse=True):
        if len(value) >= _MIN_LITERAL:
            text = text.replace(value, REDACTED)
    return redact_text(text)


def _redact_pair(match: re.Match[str]) -> str:
    if not is_secret_name(match["name"]):
        return match[0]
    quote = match.groupdict().get("vq") or ""
    return f"{match['lead']}{quote}{REDACTED}{quote}"


def _redact_entry(key: str, value: Any) -> Any:
    if key.lower() == "env":
        return _redact_env(value)
    if is_secret_name(key):
        return value if value in (None, "", {}, []) else REDACTED
    return _redact_value(value)


def _redact_env(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): REDACTED for k in value}
    if isinstance(value, list | tuple):
        # ``["NAME=value", ...]``: the names stay readable, the values do not.
        return [
            f"{item.split('=', 1)[0]}={REDACTED}"
            if isinstance(item, str) and "=" in item
            else REDACTED
            for item in value
        ]
    return value if value in (None, "") else REDACTED


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {str(k): _redact_entry(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return _redact_args(list(value))
    return value


def _redact_args(items: list[Any]) -> list[Any]:
    """A list, with the value after a secret-like flag (``--api-key sk-…``) redacted."""
    out: list[Any] = []
    hide_next = False
    for item in items:
        if hide_next and isinstance(item, str):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = isinstance(item, str) and _is_secret_flag(item)
        out.append(_redact_value(item))
    return out


def _is_secret_flag(item: str) -> bool:
    return item.startswith("-") and "=" not in item and is_secret_name(item.lstrip("-"))


def _collect(value: Any, found: set[str], *, secret: bool) -> None:
    if isinstance(value, str):
        if secret:
            found.add(value)
        for match in _URL_USERINFO_PART.finditer(value):
            userinfo = match["userinfo"]
            found.add(userinfo)
            found.update(part for part in userinfo.split(":", 1)[1:] if part)
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            name = str(k)
            if name.lower() == "env":
                _collect_env(v, found)
            else:
                _collect(v, found, secret=secret or is_secret_name(name))
        return
    if isinstance(value, list | tuple):
        hide_next = False
        for item in value:
            _collect(item, found, secret=secret or hide_next)
            hide_next = isinstance(item, str) and _is_secret_flag(item)


def _collect_env(value: Any, found: set[str]) -> None:
    if isinstance(value, Mapping):
        for v in value.values():
            _collect(v, found, secret=True)
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, str):
                found.add(item.split("=", 1)[-1])
    else:
        _collect(value, found, secret=True)
