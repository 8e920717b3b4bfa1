"""What model calls cost: the core's ``Pricing`` over ``OPSLOOP_PRICES`` and a price table.

``load_pricing`` reads ``OPSLOOP_PRICES`` once, at start-up (a YAML or JSON file of
per-model prices, for self-hosted models and any the table does not know; a bad file
is a ``ConfigError`` naming the file and the field), and returns a ``PriceTable``:
called with a model name as the chain names it (``Client.name``: ``gpt-4o``,
``anthropic:claude-sonnet-4-5``, ``llama3.1:8b``) and a call's ``Usage``, it answers the
call's cost in US dollars, or ``None`` for a model nobody prices (said once per model
in the log; such calls are counted in tokens only). A price of 0 is a price: a free
self-hosted model costs ``$0.00``, it is not unknown.

The order: the file, by the name as the chain writes it, then by the model name
without its ``openai:``/``anthropic:`` prefix; then the table, ``genai-prices``
(pydantic's, a snapshot bundled with the package, so it needs no network: opsloop never
starts its ``UpdatePrices`` fetcher, and a bot must not phone home). The table is asked
first by the model's endpoint (``endpoints``: a model served by Groq or OpenRouter costs
what they charge), then by its provider (the prefix, else ``provider_hint``: the
primary's ``LLM_PROVIDER``), then by the model name alone (a bare name on an
OpenAI-compatible endpoint of another provider, such as ``deepseek-chat``). A self-hosted
server that serves a model under a name the table knows is priced as the table says:
give it a line in ``OPSLOOP_PRICES`` (0 for free).

Cached input tokens are priced at the cached rate where there is one (else the input
rate). Not here: when a price is looked up (``bot.agent.model_step``), how a cost is
shown (``cost_text`` is, for every place that shows one: the ending, ``opsloop trace``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.agent.messages import Usage
from bot.errors import ConfigError
from bot.llm.chain import split_prefix
from bot.settings import LLMSettings

log = logging.getLogger(__name__)

TABLE = "genai-prices"
MTOK = 1_000_000

_said_unknown: set[str] = set()  # models already said to have no price (once per process)


class ModelPrices(BaseModel):
    """One model's prices in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    # Cached input (a prompt-cache hit); the input rate when not given.
    cached_input_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_rate = self.input_per_mtok
        if self.cached_input_per_mtok is not None:
            cached_rate = self.cached_input_per_mtok
        return (
            (usage.prompt_tokens - cached) * self.input_per_mtok
            + cached * cached_rate
            + usage.completion_tokens * self.output_per_mtok
        ) / MTOK


class PricesFile(BaseModel):
    """``OPSLOOP_PRICES``: ``models: {name: {input_per_mtok, output_per_mtok,
    cached_input_per_mtok?}}``."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelPrices]


def read_prices_file(path: str) -> dict[str, ModelPrices]:
    """The models of an ``OPSLOOP_PRICES`` file; ``ConfigError`` naming the file and the
    field that is wrong."""
    where = f"OPSLOOP_PRICES ({path})"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(
            f"{where}: not valid YAML or JSON{line}: {getattr(exc, 'problem', exc)}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with 'models', got {_kind(data)}")
    try:
        return PricesFile.model_validate(data).models
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "(top level)"
        raise ConfigError(f"{where}: {field}: {error['msg']}") from None


def _kind(data: object) -> str:
    return "nothing" if data is None else type(data).__name__


@dataclass(frozen=True, slots=True)
class _Own:
    """Priced by ``OPSLOOP_PRICES``."""

    prices: ModelPrices


@dataclass(frozen=True, slots=True)
class _Ask:
    """How to ask the table: by endpoint, by provider, or by the model name alone."""

    provider_id: str | None = None
    provider_api_url: str | None = None


@dataclass(frozen=True, slots=True)
class _Table:
    """Priced by the table, asked as it found the model."""

    model: str
    ask: _Ask


_Found = _Own | _Table | None


class PriceTable:
    """The core's ``Pricing``: ``(model name, usage) → USD or None``. One per process."""

    def __init__(
        self,
        own: Mapping[str, ModelPrices],
        *,
        provider_hint: str | None = None,
        endpoints: Mapping[str, str] | None = None,
    ) -> None:
        self.own = dict(own)
        self.provider_hint = provider_hint
        self.endpoints = dict(endpoints or {})
        self._found: dict[str, _Found] = {}

    def warm(self) -> None:
        """Load the table now (about 0.3 s of CPU), at start-up rather than in the event
        loop during a job's first call."""
        from genai_prices import data_snapshot

        data_snapshot.get_snapshot()

    @property
    def table_version(self) -> str:
        from importlib.metadata import version

        return f"{TABLE} {version(TABLE)}"

    def __call__(self, model: str, usage: Usage) -> float | None:
        if model in self._found:
            found = self._found[model]
        else:
            found = self._resolve(model, usage)
            self._found[model] = found
            if found is None and model not in _said_unknown:
                _said_unknown.add(model)
                log.warning(
                    "model %r has no price (not in OPSLOOP_PRICES nor in %s): its calls are "
                    "counted in tokens only; give it a line in OPSLOOP_PRICES to count its cost",
                    model,
                    self.table_version,
                )
        return self._cost(found, usage) if found is not None else None

    def _cost(self, found: _Own | _Table, usage: Usage) -> float | None:
        if isinstance(found, _Own):
            return found.prices.cost(usage)
        try:
            return float(_table_price(found.model, usage, found.ask))
        except LookupError:  # the model was found before: never expected
            return None

    def _resolve(self, name: str, usage: Usage) -> _Found:
        provider, model = split_name(name, self.provider_hint)
        for key in (name, model):
            if key in self.own:
                return _Own(self.own[key])
        asks: list[_Ask] = []
        if (url := self.endpoints.get(name)) is not None:
            asks.append(_Ask(provider_api_url=url))
        if provider is not None:
            asks.append(_Ask(provider_id=provider))
        asks.append(_Ask())
        for ask in asks:
            try:
                _table_price(model, usage, ask)
            except LookupError:
                continue
            except Exception:
                log.warning("the price table failed on %r", name, exc_info=True)
                return None
            return _Table(model, ask)
        return None


def split_name(name: str, provider_hint: str | None) -> tuple[str | None, str]:
    """(provider, model) of a chain name: ``anthropic:claude-x`` → (anthropic, claude-x);
    a bare name (``gpt-4o``, ``llama3.1:8b``) → (``provider_hint``, name)."""
    provider, model = split_prefix(name)
    if provider is not None and model:
        return provider, model
    return provider_hint, name


def _table_price(model: str, usage: Usage, ask: _Ask) -> Decimal:
    """The table's price of one call; ``LookupError`` for a model it does not know."""
    import genai_prices  # about 0.2 s: only once a model is priced

    cached = min(usage.cached_tokens, usage.prompt_tokens)
    counted: dict[str, Any] = {
        "input_tokens": usage.prompt_tokens,  # the table's input includes cache reads
        "output_tokens": usage.completion_tokens,
    }
    if cached:
        counted["cache_read_tokens"] = cached
    counted_usage = genai_prices.Usage(**counted)
    if ask.provider_api_url is not None:
        found = genai_prices.calc_price(counted_usage, model, provider_api_url=ask.provider_api_url)
    else:
        found = genai_prices.calc_price(counted_usage, model, provider_id=ask.provider_id)
    return found.total_price


def load_pricing(
    prices_file: str | None,
    provider_hint: str | None = None,
    *,
    endpoints: Mapping[str, str] | None = None,
) -> PriceTable:
    """The process's pricing: ``OPSLOOP_PRICES`` (read now; ``ConfigError`` if it is
    bad), then the table. ``provider_hint``: the provider of bare model names (the
    primary's); ``endpoints``: each chain name's base URL, when known."""
    own = read_prices_file(prices_file) if prices_file else {}
    return PriceTable(own, provider_hint=provider_hint, endpoints=endpoints)


def pricing_for(prices_file: str | None, llm: LLMSettings) -> PriceTable:
    """``load_pricing`` for the configured chain: each model's endpoint, and the
    primary's provider for bare names. A chain that cannot be parsed prices by name
    alone (its own error is reported where the chain is built)."""
    from bot.llm.chain import parse_chain

    try:
        endpoints = {spec.label: spec.base_url for spec in parse_chain(llm)}
    except ConfigError:
        endpoints = {}
    pricing = load_pricing(prices_file, llm.provider, endpoints=endpoints)
    pricing.warm()
    log.info(
        "prices: %d models from OPSLOOP_PRICES, then the table (%s)",
        len(pricing.own),
        pricing.table_version,
    )
    return pricing


# -- how a cost is shown ----------------------------------------------------------------

SMALL_USD = 0.01  # below a cent: two significant digits
TINY_USD = 0.0001  # below this: "< $0.0001"


def usd(amount: float) -> str:
    """A dollar amount, readable: ``$0.04``, ``$12.30``, ``$0.0012``, ``< $0.0001``."""
    if amount <= 0:
        return "$0.00"
    if amount < TINY_USD:
        return f"< ${TINY_USD:g}"
    rounded = float(f"{amount:.2g}")  # two significant digits below a cent
    if rounded >= SMALL_USD:
        return f"${amount:,.2f}"
    digits = 1 - math.floor(math.log10(rounded))
    return f"${rounded:.{digits}f}"


def cost_text(cost_usd: float | None, unpriced_calls: int = 0) -> str | None:
    """A job's cost as its ending and ``opsloop trace`` show it; ``None`` when no call was
    priced. Calls of models without a price make it a lower bound: ``≥ $0.04``."""
    if cost_usd is None:
        return None
    shown = usd(cost_usd)
    if not unpriced_calls:
        return shown
    return "≥ $0.00" if shown.startswith("<") else f"≥ {shown}"
