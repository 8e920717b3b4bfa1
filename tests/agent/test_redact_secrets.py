"""Credentials in tool output never reach the model, the artifacts, the trace or Slack.

A log tail, an HTTP body or a config file an SRE asks the bot to read can hold tokens,
keys and passwords; the model provider and everyone in the channel would see them. Every
tool result is scrubbed of well-known credential shapes before it is bounded, stored or
shown: the secret part becomes ``[redacted]``, what kind of thing it was stays readable.
Ordinary output (numbers, ids, hashes, URLs without credentials) is left alone.
"""

from __future__ import annotations

import asyncio

import pytest

from bot.agent import (
    CallContext,
    FunctionTool,
    InMemoryArtifacts,
    InMemoryHistory,
    StopReason,
    ToolMessage,
    run,
)
from bot.agent.redact import CHUNK_CHARS, REDACTED, redact_secrets, redact_secrets_in_turns
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, make_config

SLACK = "xoxb-" + "1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a" * 36
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"


@pytest.mark.parametrize(
    ("raw", "scrubbed"),
    [
        (f"token {SLACK} used", f"token xoxb-{REDACTED} used"),
        (f"key_id={AWS_ID}", f"key_id=AKIA{REDACTED}"),
        (f"push with {GITHUB}", f"push with ghp_{REDACTED}"),
        ("OPENAI_API_KEY is sk-proj-abcdefghijklmnopqrstuvwx", f"OPENAI_API_KEY is sk-{REDACTED}"),
        (f"jwt={JWT} ok", f"jwt=eyJ{REDACTED} ok"),
        ("Authorization: Bearer abc.def-123", f"Authorization: Bearer {REDACTED}"),
        ("authorization=Basic dXNlcjpwYXNz", f"authorization=Basic {REDACTED}"),
        ("Cookie: session=9f8e7d; theme=dark", f"Cookie: {REDACTED}"),
        (
            "db=postgres://app:s3cr3t@db-01:5432/app",
            f"db=postgres://app:{REDACTED}@db-01:5432/app",
        ),
        ("REDIS_URL=redis://:hunter22@cache:6379/0", f"REDIS_URL=redis://:{REDACTED}@cache:6379/0"),
        ("password=hunter2 user=bob", f"password={REDACTED} user=bob"),
        (  # an environment dump: DB_PASS, as apps print it
            "DB_HOST=db DB_USER=app DB_PASS=Hunter2-9f POOL=20",
            f"DB_HOST=db DB_USER=app DB_PASS={REDACTED} POOL=20",
        ),
        ("smtp_pass: 'x9y8z7'", f"smtp_pass: '{REDACTED}'"),
        (
            '{"db_password": "hunter2", "port": 5432}',
            f'{{"db_password": "{REDACTED}", "port": 5432}}',
        ),
        (
            "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG",
            f"export AWS_SECRET_ACCESS_KEY={REDACTED}",
        ),
        ("client_secret: 'abc123xyz'", f"client_secret: '{REDACTED}'"),
        ("api-key: 0a1b2c3d4e", f"api-key: {REDACTED}"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----\nnext",
            f"-----BEGIN RSA PRIVATE KEY-----\n{REDACTED}\n-----END RSA PRIVATE KEY-----\nnext",
        ),
        (  # a key cut off by a bound is still hidden
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{REDACTED}",
        ),
    ],
)
def test_credentials_are_redacted(raw: str, scrubbed: str) -> None:
    assert redact_secrets(raw) == scrubbed


@pytest.mark.parametrize(
    "raw",
    [
        "load average: 0.42 0.51 0.60",
        "max_tokens: 4096",  # a number is not a secret
        "token_budget=200000 tokens=1,367",
        "password: true",  # nor a switch
        "password_expiry=none",
        "secretName: tls-cert",  # Kubernetes: names a secret, does not hold one
        "valueFrom:\n  secretKeyRef:\n    name: db-credentials\n    key: password",
        "password_file=/run/secrets/db",
        '{"token_type": "Bearer", "expires_in": 3600}',
        "AWS_ACCESS_KEY_ID=",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
        "GET https://example.com/health?id=42 200",
        "pod web-7d9f8c6b5-x2x9z restarted; ask-tokens disabled",
        "Authorization header missing",
        "bypass=cache-layer passes=3 passenger: alice",  # pass only as a word of its own
        "pass: true",
        "",
    ],
)
def test_ordinary_output_is_left_alone(raw: str) -> None:
    assert redact_secrets(raw) == raw


async def test_a_tool_result_is_scrubbed_before_the_model_and_the_artifacts_see_it() -> None:
    leak = f"GET /v1 Authorization: Bearer {SLACK}\n" + "log line\n" * 600

    async def fn(args: HostArgs, ctx: CallContext) -> str:
        return leak

    tool = FunctionTool(name="logs", description="logs", args_model=HostArgs, fn=fn)
    model = ScriptedModel([calls(call("logs", "c1", host="web-03")), text("done")])
    memory, artifacts = InMemoryHistory(), InMemoryArtifacts()
    result = await run(make_config(model, tools=[tool], memory=memory, artifacts=artifacts))

    assert result.stop_reason is StopReason.COMPLETED
    sent = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)][0]
    assert SLACK not in sent.content and f"Bearer {REDACTED}" in sent.content
    assert artifacts.items and all(SLACK not in v for v in artifacts.items.values())
    assert all(SLACK not in str(m) for m in memory.messages)


async def test_a_large_output_is_scrubbed_in_slices_with_the_same_result() -> None:
    line = "2026-11-30 INFO GET /api/orders 200 12ms\n"
    secret_lines = [
        f"WARN login failed password=hunter{i} Authorization: Bearer tok{i}xyz\n" for i in range(50)
    ]
    key = "-----BEGIN EC PRIVATE KEY-----\n" + "QUJD\n" * 2000 + "-----END EC PRIVATE KEY-----\n"
    text = "".join(line * 200 + s for s in secret_lines[:25]) + key
    text += "".join(line * 200 + s for s in secret_lines[25:])
    assert len(text) > 4 * CHUNK_CHARS

    yields = 0
    done = asyncio.Event()

    async def count_yields() -> None:
        nonlocal yields
        while not done.is_set():
            yields += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_yields())
    sliced = await redact_secrets_in_turns(text)
    done.set()
    await counter
    assert sliced == redact_secrets(text)
    assert "hunter" not in sliced and "QUJD" not in sliced and "tok7xyz" not in sliced
    assert sliced.count(f"password={REDACTED}") == 50
    assert yields >= 4  # the event loop ran between slices
