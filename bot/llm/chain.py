"""The model chain: ``LLM_MODEL`` followed by ``LLM_FALLBACK_MODELS``.

Parsing follows docs/configuration.md ("The model") exactly: a bare name uses the
primary's endpoint and provider; only the ``openai:`` and ``anthropic:`` prefixes select
another endpoint
(``OPENAI_BASE_URL``/``OPENAI_API_KEY`` or ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``).
Anything else with a colon (``llama3.1:8b``) is a bare name. The agent core walks the
chain forward on transient failures, each model at most once per job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import httpx

from bot.agent.ports import Client
from bot.errors import ConfigError
from bot.llm.retry import RetryPolicy
from bot.settings import LLMSettings

if TYPE_CHECKING:
    from bot.llm.anthropic import AnthropicClient
    from bot.llm.openai import OpenAIClient

Provider = Literal["openai", "anthropic"]
PREFIXES: tuple[Provider, ...] = ("openai", "anthropic")
_BY_PREFIX: dict[str, Provider] = {provider: provider for provider in PREFIXES}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    provider: Provider
    model: str
    base_url: str
    api_key: str | None
    label: str  # how the chain names it: "gpt-4o", "anthropic:claude-sonnet-4-5"

    def __repr__(self) -> str:  # never show the key
        return f"ModelSpec({self.label!r} at {self.base_url})"


def split_prefix(name: str) -> tuple[Provider | None, str]:
    """A chain name's provider prefix and the model after it (stripped, maybe empty):
    ``anthropic:claude-x`` → (``anthropic``, ``claude-x``); a bare name (``gpt-4o``,
    ``llama3.1:8b``) → (``None``, the name)."""
    prefix, colon, rest = name.partition(":")
    provider = _BY_PREFIX.get(prefix) if colon else None
    return (provider, rest.strip()) if provider is not None else (None, name)


def parse_chain(settings: LLMSettings) -> list[ModelSpec]:
    """The primary model and its fallbacks, in order; ``ConfigError`` on a bad entry."""
    if not settings.model:
        raise ConfigError("LLM_MODEL: required (the model name to use)")
    primary = ModelSpec(
        provider=settings.provider,
        model=settings.model,
        base_url=settings.effective_base_url,
        api_key=settings.api_key,
        label=settings.model,
    )
    endpoints = {
        "openai": (settings.openai_base_url, settings.openai_api_key),
        "anthropic": (settings.anthropic_base_url, settings.anthropic_api_key),
    }
    chain = [primary]
    for raw in settings.fallback_models.split(","):
        item = raw.strip()
        if not item:
            continue
        provider, model = split_prefix(item)
        if provider is None:  # a bare name: the primary's endpoint and provider
            chain.append(replace(primary, model=item, label=item))
            continue
        if not model:
            raise ConfigError(f"LLM_FALLBACK_MODELS: {item!r} names no model")
        base_url, api_key = endpoints[provider]
        chain.append(
            ModelSpec(
                provider=provider, model=model, base_url=base_url, api_key=api_key, label=item
            )
        )
    return chain


class ModelChain:
    """The core's ``ClientResolver``: one client per model of the chain."""

    def __init__(self, clients: Sequence[Client]) -> None:
        if not clients:
            raise ConfigError("LLM_MODEL: no model configured")
        self._clients = tuple(clients)

    def chain(self) -> Sequence[Client]:
        return self._clients


def make_client(
    spec: ModelSpec,
    http: httpx.AsyncClient,
    *,
    settings: LLMSettings,
    retry: RetryPolicy | None = None,
) -> Client:
    client_class: type[AnthropicClient] | type[OpenAIClient]
    if spec.provider == "anthropic":
        from bot.llm.anthropic import AnthropicClient as client_class
    else:
        from bot.llm.openai import OpenAIClient as client_class
    return client_class(
        model=spec.model,
        base_url=spec.base_url,
        http=http,
        api_key=spec.api_key,
        temperature=settings.temperature,
        retry=retry,
        request_timeout_s=settings.request_timeout_s,
        name=spec.label,
    )


def build_chain(
    settings: LLMSettings, http: httpx.AsyncClient, *, retry: RetryPolicy | None = None
) -> ModelChain:
    return ModelChain(
        [make_client(s, http, settings=settings, retry=retry) for s in parse_chain(settings)]
    )
