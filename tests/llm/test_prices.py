"""Model prices: ``OPSLOOP_PRICES`` first, then the bundled price table, offline.

A model name is the chain's (``gpt-4o``, ``anthropic:claude-sonnet-4-5``, ``llama3.1:8b``);
an unknown model costs ``None`` and is said once in the log; a price of 0 is a price.
A bad prices file is a ``ConfigError`` naming the file and the field.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import genai_prices
import pytest
from genai_prices import update_prices

from bot.agent.messages import Usage
from bot.errors import ConfigError
from bot.llm.prices import cost_text, load_pricing, pricing_for, split_name, usd
from bot.settings import LLMSettings

MILLION = 1_000_000

PRICES_YAML = """\
models:
  "llama3.1:8b": {input_per_mtok: 0.2, output_per_mtok: 0.4, cached_input_per_mtok: 0.05}
  free-local: {input_per_mtok: 0, output_per_mtok: 0}
  gpt-4o: {input_per_mtok: 1, output_per_mtok: 1}
"""


def write(tmp_path: Path, text: str, name: str = "prices.yml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def used(prompt: int, completion: int, cached: int = 0) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


def table(model: str, usage: Usage, **ask: str) -> float:
    counted = genai_prices.Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens,
    )
    return float(genai_prices.calc_price(counted, model, **ask).total_price)  # type: ignore[call-overload]


# -- OPSLOOP_PRICES ------------------------------------------------------------------


def test_a_model_in_the_prices_file_costs_what_the_file_says(tmp_path: Path) -> None:
    pricing = load_pricing(write(tmp_path, PRICES_YAML))
    cost = pricing("llama3.1:8b", used(MILLION, MILLION, cached=MILLION // 2))
    assert cost == pytest.approx(0.5 * 0.2 + 0.5 * 0.05 + 0.4)


def test_cached_tokens_cost_the_input_rate_when_the_file_gives_no_cached_rate(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "models: {m: {input_per_mtok: 2, output_per_mtok: 4}}\n")
    assert load_pricing(path)("m", used(MILLION, 0, cached=MILLION)) == pytest.approx(2)


def test_a_free_model_costs_zero_not_none(tmp_path: Path) -> None:
    assert load_pricing(write(tmp_path, PRICES_YAML))("free-local", used(5000, 500)) == 0.0


def test_the_file_wins_over_the_table(tmp_path: Path) -> None:
    pricing = load_pricing(write(tmp_path, PRICES_YAML), "openai")
    assert pricing("gpt-4o", used(MILLION, MILLION)) == pytest.approx(2)


def test_a_prefixed_chain_name_finds_the_files_bare_name(tmp_path: Path) -> None:
    pricing = load_pricing(write(tmp_path, PRICES_YAML))
    assert pricing("openai:free-local", used(100, 100)) == 0.0


def test_the_file_may_be_json(tmp_path: Path) -> None:
    body = json.dumps({"models": {"mistral:7b": {"input_per_mtok": 1, "output_per_mtok": 3}}})
    pricing = load_pricing(write(tmp_path, body, "prices.json"))
    assert pricing("mistral:7b", used(MILLION, MILLION)) == pytest.approx(4)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("models: {m: {input_per_mtok: 1}}\n", "models.m.output_per_mtok: Field required"),
        ("models: {m: {input_per_mtok: -1, output_per_mtok: 1}}\n", "models.m.input_per_mtok"),
        ("models: {m: {input_per_mtok: .nan, output_per_mtok: 1}}\n", "models.m.input_per_mtok"),
        ("models: {m: {input_per_mtok: 1, output_per_mtok: 1, cachd: 1}}\n", "models.m.cachd"),
        ("models: {m: {input_per_mtok: one, output_per_mtok: 1}}\n", "models.m.input_per_mtok"),
        ("prices: {}\n", "models: Field required"),
        ("- a list\n", "expected a mapping with 'models', got list"),
        ("", "expected a mapping with 'models', got nothing"),
        ("models: {m: [1, 2}\n", "not valid YAML or JSON"),
    ],
)
def test_a_bad_prices_file_names_the_file_and_the_field(
    tmp_path: Path, body: str, says: str
) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as caught:
        load_pricing(path)
    assert f"OPSLOOP_PRICES ({path})" in str(caught.value)
    assert says in str(caught.value)


def test_a_missing_prices_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_pricing(str(tmp_path / "nope.yml"))


# -- the price table -----------------------------------------------------------------


def test_a_known_model_costs_what_the_table_says() -> None:
    pricing = load_pricing(None, "openai")
    usage = used(12_000, 800)
    cost = pricing("gpt-4o", usage)
    assert cost is not None and cost > 0
    assert cost == pytest.approx(table("gpt-4o", usage, provider_id="openai"))


def test_cached_input_costs_less_where_the_table_has_a_cached_rate() -> None:
    pricing = load_pricing(None, "openai")
    cold = pricing("gpt-4o", used(10_000, 100))
    warm = pricing("gpt-4o", used(10_000, 100, cached=8_000))
    assert cold is not None and warm is not None and warm < cold


def test_a_prefix_names_the_provider_and_a_bare_name_takes_the_hint() -> None:
    usage = used(10_000, 1_000)
    expected = table("claude-sonnet-4-5", usage, provider_id="anthropic")
    assert load_pricing(None, "openai")("anthropic:claude-sonnet-4-5", usage) == pytest.approx(
        expected
    )
    assert load_pricing(None, "anthropic")("claude-sonnet-4-5", usage) == pytest.approx(expected)


def test_a_bare_name_of_another_provider_is_still_found() -> None:
    # An OpenAI-compatible endpoint of another provider: the model name finds it.
    usage = used(10_000, 1_000)
    cost = load_pricing(None, "openai")("deepseek-chat", usage)
    assert cost == pytest.approx(table("deepseek-chat", usage))


def test_the_endpoint_picks_the_provider_that_serves_the_model() -> None:
    url = "https://api.groq.com/openai/v1"
    usage = used(MILLION, MILLION)
    pricing = load_pricing(None, "openai", endpoints={"llama-3.1-8b-instant": url})
    cost = pricing("llama-3.1-8b-instant", usage)
    assert cost == pytest.approx(table("llama-3.1-8b-instant", usage, provider_api_url=url))
    assert load_pricing(None, "openai")("llama-3.1-8b-instant", usage) is None


def test_the_configured_chain_is_priced_by_each_models_endpoint_and_provider(
    tmp_path: Path,
) -> None:
    groq = "https://api.groq.com/openai/v1"
    llm = LLMSettings(
        LLM_MODEL="llama-3.1-8b-instant",
        LLM_BASE_URL=groq,
        LLM_FALLBACK_MODELS="anthropic:claude-sonnet-4-5,llama3.1:8b",
    )
    pricing = pricing_for(write(tmp_path, PRICES_YAML), llm)
    usage = used(MILLION, MILLION)
    groq_cost = table("llama-3.1-8b-instant", usage, provider_api_url=groq)
    assert pricing("llama-3.1-8b-instant", usage) == pytest.approx(groq_cost)
    claude = table("claude-sonnet-4-5", usage, provider_id="anthropic")
    assert pricing("anthropic:claude-sonnet-4-5", usage) == pytest.approx(claude)
    assert pricing("llama3.1:8b", usage) == pytest.approx(0.2 + 0.4)


def test_an_unknown_model_is_none_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="bot.llm.prices")
    first, second = load_pricing(None, "openai"), load_pricing(None, "openai")
    for pricing in (first, second):
        for _ in range(3):
            assert pricing("my-own-finetune-7b", used(100, 10)) is None
    said = [r for r in caplog.records if "my-own-finetune-7b" in r.getMessage()]
    assert len(said) == 1
    assert "OPSLOOP_PRICES" in said[0].getMessage()


def test_pricing_never_reaches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("pricing tried the network")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    pricing = load_pricing(None, "openai")
    for name in ("gpt-4o", "anthropic:claude-sonnet-4-5", "deepseek-chat", "nobody-knows-me"):
        pricing(name, used(1000, 100))
    assert genai_prices.data_snapshot.get_snapshot().from_auto_update is False
    assert update_prices._shared_updater.ref_count == 0  # the fetcher was never started


def test_the_table_version_is_named() -> None:
    assert load_pricing(None).table_version == f"genai-prices {genai_prices.__version__}"


def test_chain_names_split_into_provider_and_model() -> None:
    assert split_name("anthropic:claude-x", "openai") == ("anthropic", "claude-x")
    assert split_name("openai:gpt-4o", None) == ("openai", "gpt-4o")
    assert split_name("llama3.1:8b", "openai") == ("openai", "llama3.1:8b")
    assert split_name("gpt-4o", None) == (None, "gpt-4o")


# -- how a cost is shown -------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (0.0, "$0.00"),
        (0.04, "$0.04"),
        (0.0449, "$0.04"),
        (12.3, "$12.30"),
        (1234.5, "$1,234.50"),
        (0.0012, "$0.0012"),
        (0.00123, "$0.0012"),
        (0.000345, "$0.00034"),
        (0.00999, "$0.01"),
        (0.00004, "< $0.0001"),
    ],
)
def test_dollar_amounts_are_readable(amount: float, shown: str) -> None:
    assert usd(amount) == shown


def test_a_job_cost_is_a_lower_bound_when_some_calls_had_no_price() -> None:
    assert cost_text(None) is None
    assert cost_text(None, 3) is None
    assert cost_text(0.04) == "$0.04"
    assert cost_text(0.04, 1) == "≥ $0.04"
    assert cost_text(0.0, 0) == "$0.00"


def test_the_example_prices_file_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "prices.yml"
    pricing = load_pricing(str(example))
    assert pricing("llama3.1:8b", used(MILLION, MILLION)) == 0.0
    assert pricing("qwen2.5:32b", used(MILLION, MILLION, cached=MILLION)) == pytest.approx(0.65)
