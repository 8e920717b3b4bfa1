"""Credentials scrubbed from tool output before the model, the store or Slack sees it.

A log tail, an HTTP body or a config file can hold tokens, keys and passwords; whatever a
tool returns goes to the model provider, into Redis (history, artifacts) and into a
channel many people read. ``redact_secrets`` replaces the secret part of well-known
credential shapes with ``[redacted]`` and keeps what kind of thing it was readable
(``Authorization: Bearer [redacted]``, ``xoxb-[redacted]``, ``password=[redacted]``):

- private key blocks (also when a bound cut their end off);
- tokens with a known prefix: Slack, AWS access key ids, GitHub, OpenAI/Anthropic-style
  ``sk-``, Stripe live keys, Google API keys, JWTs;
- ``Authorization`` / ``Proxy-Authorization`` values and ``Cookie`` / ``Set-Cookie`` lines;
- the password of a URL (``postgres://app:[redacted]@db-01``);
- the value of any ``key=value`` / ``key: value`` whose key names a password (``DB_PASS``
  too: ``pass`` as a word of its own, not ``bypass``), secret,
  token, API or access key, private key or credential, on the same line — unless the
  value is a number, a boolean or null (``max_tokens: 4096`` stays) or the key only names
  or describes a secret (``secretName: tls-cert``, ``password_file=…``, ``token_type``).

It is a net for accidents, not a guarantee: a secret with no recognisable shape or key
passes. The bot's own secrets given to command tools are also redacted by value there.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence

REDACTED = "[redacted]"

_PRIVATE_KEY = re.compile(
    r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(.*?)(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_PREFIXED = re.compile(
    r"\b(?:"
    r"(xox[abposre]-|xapp-)[A-Za-z0-9-]{10,}"
    r"|(AKIA|ASIA)[A-Z0-9]{16}\b"
    r"|(gh[pousr]_)[A-Za-z0-9]{30,}"
    r"|(github_pat_)[A-Za-z0-9_]{20,}"
    r"|(sk-)(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"
    r"|([rs]k_live_)[0-9A-Za-z]{10,}"
    r"|(AIza)[0-9A-Za-z_-]{30,}"
    r"|(eyJ)[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"
    r")"
)
_AUTHORIZATION = re.compile(
    r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
    r"(?:(bearer|basic|token|digest|negotiate)\s+)?([^\s\"',;]+)"
)
_COOKIE = re.compile(r"(?im)\b((?:set-)?cookie\s*:\s*)[^\r\n]+")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+(@)")
# Starts at the keyword (whatever precedes it, ``db_`` in ``db_password``, is kept as is).
_KEYED = re.compile(
    r"(?i)((?:password|passwd|pwd|(?<![a-z])pass(?![a-z])|secret|token|api[_-]?key"
    r"|access[_-]?key|private[_-]?key|credential)[\w.-]*)"
    r"([\"']?[ \t]*[:=][ \t]*)([\"']?)([^\s\"',;&}]+)"
)
# Keys that name or describe a secret rather than hold it (``secretName: tls-cert``,
# ``password_file=/run/secrets/db``, ``token_type: Bearer``).
_ABOUT_A_SECRET = re.compile(
    r"(?i)(name|ref|type|id|file|path|expiry|expires|expires_in|expires_at|length|count|ttl"
    r"|size|version|hash|limit|budget)$"
)
_NOT_SECRET = re.compile(r"(?i)-?[\d.,_]+|true|false|null|none|nil|yes|no|on|off|\[redacted\]")


def _private_key(m: re.Match[str]) -> str:
    end = f"\n{m[3]}" if m[3] else ""
    return f"{m[1]}\n{REDACTED}{end}"


def _prefixed(m: re.Match[str]) -> str:
    prefix = next(group for group in m.groups() if group is not None)
    return prefix + REDACTED


def _authorization(m: re.Match[str]) -> str:
    scheme = f"{m[2]} " if m[2] else ""
    return f"{m[1]}{scheme}{REDACTED}"


def _keyed(m: re.Match[str]) -> str:
    if _NOT_SECRET.fullmatch(m[4]) or _ABOUT_A_SECRET.search(m[1]):
        return m[0]
    return f"{m[1]}{m[2]}{m[3]}{REDACTED}"


_KEYWORDS = (
    "password", "passwd", "pwd", "pass", "secret", "token", "apikey", "api_key", "api-key",
    "accesskey", "access_key", "access-key", "privatekey", "private_key", "private-key",
    "credential",
)  # fmt: skip
_PREFIXES = (
    "xox", "xapp-", "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "sk-", "k_live_", "aiza", "eyj",
)  # fmt: skip

# Each rule runs only when one of its trigger strings is in the lowered text: most tool
# output holds none, and then scrubbing costs one ``lower()`` and a few substring scans.
_RULES: tuple[tuple[tuple[str, ...], re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (("private key",), _PRIVATE_KEY, _private_key),
    (_PREFIXES, _PREFIXED, _prefixed),
    (("cookie",), _COOKIE, lambda m: m[1] + REDACTED),
    (("authorization",), _AUTHORIZATION, _authorization),
    (("@",), _URL_PASSWORD, lambda m: f"{m[1]}{REDACTED}{m[2]}"),
    (_KEYWORDS, _KEYED, _keyed),
)


def mask_values(text: str, secrets: Sequence[str], mask: str = REDACTED) -> str:
    """``text`` with every one of ``secrets`` (known values; give them longest first, so
    a secret inside another is not half masked) replaced by ``mask``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, mask)
    return text


def redact_secrets(text: str) -> str:
    """``text`` with the credentials it visibly holds replaced by ``[redacted]``."""
    lowered = text.lower()
    for triggers, pattern, replace in _RULES:
        if any(trigger in lowered for trigger in triggers):
            text = pattern.sub(replace, text)
    return text


CHUNK_CHARS = 32 * 1024


async def redact_secrets_in_turns(text: str, *, chunk_chars: int = CHUNK_CHARS) -> str:
    """``redact_secrets`` for output of any size without holding the event loop: past
    ``chunk_chars`` the text is scrubbed a block of whole lines at a time, yielding in
    between (a megabyte full of secrets costs about 0.2 s of regex work; this turns it
    into short slices). Private key blocks, which span lines, are handled on the whole
    text first."""
    if len(text) <= chunk_chars:
        return redact_secrets(text)
    if "private key" in text.lower():
        text = _PRIVATE_KEY.sub(_private_key, text)
    parts: list[str] = []
    start = 0
    while start < len(text):
        end = text.find("\n", start + chunk_chars)
        end = len(text) if end < 0 else end + 1
        parts.append(redact_secrets(text[start:end]))
        start = end
        await asyncio.sleep(0)
    return "".join(parts)
