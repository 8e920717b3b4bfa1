"""The model chain from ``LLM_MODEL`` + ``LLM_FALLBACK_MODELS``, parsed as the README says.

A bare name (``llama3.1:8b`` included) uses the primary's endpoint, key and provider;
only ``openai:`` and ``anthropic:`` select another endpoint (``OPENAI_BASE_URL`` +
``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL`` + ``ANTHROPIC_API_KEY``). Empty entries are
ignored; a prefix without a model, or no ``LLM_MODEL`` at all, is a ``ConfigError``.
``ModelSpec`` never shows its key. ``LLM_PROVIDER=anthropic`` defaults the base URL to
Anthropic's; a malformed variable is a ``ConfigError`` naming it. A built chain really
sends each model to its own endpoint with its own key.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bot.agent.messages import ModelRequest, UserMessage
from bot.emulator.scripted import Reply
from bot.errors import ConfigError
from bot.llm.chain import ModelChain, ModelSpec, build_chain, parse_chain
from bot.llm.openai import OpenAIClient
from bot.settings import ANTHROPIC_BASE_URL, OPENAI_BASE_URL, LLMSettings, load_llm_settings

from .conftest import FAST_RETRY, Serve

PRIMARY_URL = "http://vllm.internal:8000/v1"
PRIMARY_KEY = "sk-primary-secret"
OPENAI_URL = "https://openai.example/v1"
OPENAI_KEY = "sk-openai-secret"
ANTHROPIC_URL = "https://anthropic.example"
ANTHROPIC_KEY = "sk-ant-secret"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets counts: the runner's own LLM_* variables are removed."""
    for field in LLMSettings.model_fields.values():
        if field.alias:
            monkeypatch.delenv(field.alias, raising=False)


def settings(**env: Any) -> LLMSettings:
    values: dict[str, Any] = {
        "LLM_MODEL": "gpt-4o",
        "LLM_BASE_URL": PRIMARY_URL,
        "LLM_API_KEY": PRIMARY_KEY,
        "OPENAI_BASE_URL": OPENAI_URL,
        "OPENAI_API_KEY": OPENAI_KEY,
        "ANTHROPIC_BASE_URL": ANTHROPIC_URL,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
    }
    values.update(env)
    return LLMSettings(**{k: v for k, v in values.items() if v is not None})


def test_primary_alone() -> None:
    (primary,) = parse_chain(settings())

    assert primary == ModelSpec(
        provider="openai",
        model="gpt-4o",
        base_url=PRIMARY_URL,
        api_key=PRIMARY_KEY,
        label="gpt-4o",
    )


def test_bare_names_use_the_primary_endpoint() -> None:
    chain = parse_chain(settings(LLM_FALLBACK_MODELS="gpt-4o-mini,llama3.1:8b"))

    assert [(s.provider, s.model, s.base_url, s.api_key, s.label) for s in chain[1:]] == [
        ("openai", "gpt-4o-mini", PRIMARY_URL, PRIMARY_KEY, "gpt-4o-mini"),
        ("openai", "llama3.1:8b", PRIMARY_URL, PRIMARY_KEY, "llama3.1:8b"),
    ]


def test_openai_prefix_uses_the_openai_endpoint() -> None:
    chain = parse_chain(settings(LLM_FALLBACK_MODELS="openai:gpt-4o-mini"))

    assert chain[1] == ModelSpec(
        provider="openai",
        model="gpt-4o-mini",
        base_url=OPENAI_URL,
        api_key=OPENAI_KEY,
        label="openai:gpt-4o-mini",
    )


def test_anthropic_prefix_uses_the_anthropic_endpoint() -> None:
    chain = parse_chain(settings(LLM_FALLBACK_MODELS="anthropic:claude-x"))

    assert chain[1] == ModelSpec(
        provider="anthropic",
        model="claude-x",
        base_url=ANTHROPIC_URL,
        api_key=ANTHROPIC_KEY,
        label="anthropic:claude-x",
    )


def test_prefixed_endpoints_default_to_the_public_apis() -> None:
    chain = parse_chain(
        settings(
            LLM_FALLBACK_MODELS="openai:gpt-4o-mini,anthropic:claude-x",
            OPENAI_BASE_URL=None,
            ANTHROPIC_BASE_URL=None,
        )
    )

    assert [s.base_url for s in chain[1:]] == [OPENAI_BASE_URL, ANTHROPIC_BASE_URL]
    assert OPENAI_BASE_URL == "https://api.openai.com/v1"
    assert ANTHROPIC_BASE_URL == "https://api.anthropic.com"


def test_bare_names_follow_an_anthropic_primary() -> None:
    chain = parse_chain(
        settings(
            LLM_PROVIDER="anthropic",
            LLM_MODEL="claude-sonnet-4-5",
            LLM_BASE_URL=None,
            LLM_FALLBACK_MODELS="claude-haiku-4-5",
        )
    )

    assert [(s.provider, s.model, s.base_url, s.api_key) for s in chain] == [
        ("anthropic", "claude-sonnet-4-5", "https://api.anthropic.com", PRIMARY_KEY),
        ("anthropic", "claude-haiku-4-5", "https://api.anthropic.com", PRIMARY_KEY),
    ]


def test_openai_provider_defaults_to_the_openai_api() -> None:
    (primary,) = parse_chain(settings(LLM_BASE_URL=None))

    assert primary.base_url == "https://api.openai.com/v1"


def test_order_and_mixed_entries() -> None:
    chain = parse_chain(
        settings(LLM_FALLBACK_MODELS="anthropic:claude-x, gpt-4o-mini ,openai:o3,qwen2.5:7b")
    )

    assert [s.label for s in chain] == [
        "gpt-4o",
        "anthropic:claude-x",
        "gpt-4o-mini",
        "openai:o3",
        "qwen2.5:7b",
    ]
    assert [s.provider for s in chain] == ["openai", "anthropic", "openai", "openai", "openai"]


@pytest.mark.parametrize("value", ["", " ", ",", " , ,, ", "\t,\n"])
def test_empty_fallbacks_are_ignored(value: str) -> None:
    assert len(parse_chain(settings(LLM_FALLBACK_MODELS=value))) == 1


def test_whitespace_and_empty_entries_are_ignored() -> None:
    chain = parse_chain(settings(LLM_FALLBACK_MODELS=" , gpt-a ,, ,gpt-b , "))

    assert [s.model for s in chain] == ["gpt-4o", "gpt-a", "gpt-b"]


@pytest.mark.parametrize("entry", ["openai:", "anthropic:", "openai:  ", "gpt-a,anthropic: "])
def test_prefix_without_a_model(entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_chain(settings(LLM_FALLBACK_MODELS=entry))

    assert "LLM_FALLBACK_MODELS" in str(caught.value)


@pytest.mark.parametrize("model", [None, ""])
def test_missing_model(model: str | None) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_chain(settings(LLM_MODEL=model))

    assert "LLM_MODEL" in str(caught.value)


def test_spec_repr_hides_the_key() -> None:
    chain = parse_chain(settings(LLM_FALLBACK_MODELS="openai:gpt-4o-mini,anthropic:claude-x"))

    for spec in chain:
        shown = f"{spec!r} {spec} {chain!r}"
        assert spec.label in shown
        for key in (PRIMARY_KEY, OPENAI_KEY, ANTHROPIC_KEY):
            assert key not in shown


def test_settings_repr_hides_the_keys() -> None:
    shown = repr(settings())

    for key in (PRIMARY_KEY, OPENAI_KEY, ANTHROPIC_KEY):
        assert key not in shown


def test_empty_chain_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        ModelChain([])


# -- from the environment --------------------------------------------------------------


def test_chain_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("LLM_MODEL", "claude-sonnet-4-5")
    monkeypatch.setenv("LLM_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("LLM_FALLBACK_MODELS", "openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)

    chain = parse_chain(load_llm_settings())

    assert [(s.provider, s.model, s.base_url, s.api_key) for s in chain] == [
        ("anthropic", "claude-sonnet-4-5", "https://api.anthropic.com", ANTHROPIC_KEY),
        ("openai", "gpt-4o-mini", "https://api.openai.com/v1", OPENAI_KEY),
    ]


@pytest.mark.parametrize("value", ["lots", "0", "1.5", "-0.2"])
def test_bad_condense_at_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LLM_MODEL", "gpt-4o")
    monkeypatch.setenv("OPSLOOP_CONDENSE_AT", value)

    with pytest.raises(ConfigError) as caught:
        load_llm_settings()

    assert str(caught.value).startswith("OPSLOOP_CONDENSE_AT")


def test_good_condense_at(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_MODEL", "gpt-4o")
    monkeypatch.setenv("OPSLOOP_CONDENSE_AT", "0.5")
    monkeypatch.setenv("LLM_CONTEXT_TOKENS", "32000")

    loaded = load_llm_settings()

    assert loaded.condense_at_tokens == 16000


def test_bad_provider_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_MODEL", "gpt-4o")
    monkeypatch.setenv("LLM_PROVIDER", "gemini")

    with pytest.raises(ConfigError) as caught:
        load_llm_settings()

    assert "LLM_PROVIDER" in str(caught.value)


# -- a built chain, over HTTP ------------------------------------------------------------


async def test_built_chain_sends_each_model_to_its_endpoint(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    primary = await serve(lambda _: Reply(content="from the primary endpoint"))
    openai = await serve(lambda _: Reply(content="from OpenAI"))
    built = build_chain(
        settings(
            LLM_BASE_URL=primary.base_url,
            OPENAI_BASE_URL=openai.base_url,
            LLM_FALLBACK_MODELS="llama3.1:8b,openai:gpt-4o-mini",
        ),
        http,
        retry=FAST_RETRY,
    )
    ask = ModelRequest(
        system="s", tools=(), messages=[UserMessage(content="hi")], max_output_tokens=64
    )

    clients = built.chain()
    answers = [await c.complete(ask) for c in clients]

    assert [c.name for c in clients] == ["gpt-4o", "llama3.1:8b", "openai:gpt-4o-mini"]
    assert all(isinstance(c, OpenAIClient) for c in clients)
    assert [a.content for a in answers] == [
        "from the primary endpoint",
        "from the primary endpoint",
        "from OpenAI",
    ]
    assert [(r.model, r.headers["authorization"]) for r in primary.requests] == [
        ("gpt-4o", f"Bearer {PRIMARY_KEY}"),
        ("llama3.1:8b", f"Bearer {PRIMARY_KEY}"),
    ]
    assert [(r.model, r.headers["authorization"]) for r in openai.requests] == [
        ("gpt-4o-mini", f"Bearer {OPENAI_KEY}"),
    ]
