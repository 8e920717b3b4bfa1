"""Configuration from the environment: the only module that reads it.

Each group is a pydantic-settings model with the exact variable names of the README's
configuration table; defaults are named constants. A missing or malformed variable
becomes a ``ConfigError`` naming it (the CLI prints that one line and exits).
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.errors import ConfigError

# ``password=…`` in a libpq keyword DSN or a URL's query string.
_DSN_PASSWORD = re.compile(r"(^|[\s&])password=('[^']*'|[^\s&]+)")

OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_CONTEXT_TOKENS = 128_000
DEFAULT_CONDENSE_AT = 0.8
DEFAULT_MAX_OUTPUT_TOKENS = 4096


def _secret_values(settings: BaseSettings) -> list[str]:
    """The values of the fields kept out of ``repr`` (tokens, keys, URLs that may carry a
    password), for masking in logs; of a URL, only its password."""
    found: list[str] = []
    for name, info in type(settings).model_fields.items():
        value = getattr(settings, name)
        if info.repr or not isinstance(value, str) or not value:
            continue
        if "://" in value:
            password = urlsplit(value).password
            if password:
                found.append(unquote(password))
                found.append(password)
        else:
            found.append(value)
    return found


class LLMSettings(BaseSettings):
    """The model endpoint(s): ``LLM_*``, fallback endpoints, context and output sizes."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True)

    provider: Literal["openai", "anthropic"] = Field("openai", alias="LLM_PROVIDER")
    base_url: str | None = Field(None, alias="LLM_BASE_URL")
    api_key: str | None = Field(None, alias="LLM_API_KEY", repr=False)
    model: str | None = Field(None, alias="LLM_MODEL")
    fallback_models: str = Field("", alias="LLM_FALLBACK_MODELS")
    openai_base_url: str = Field(OPENAI_BASE_URL, alias="OPENAI_BASE_URL")
    openai_api_key: str | None = Field(None, alias="OPENAI_API_KEY", repr=False)
    anthropic_base_url: str = Field(ANTHROPIC_BASE_URL, alias="ANTHROPIC_BASE_URL")
    anthropic_api_key: str | None = Field(None, alias="ANTHROPIC_API_KEY", repr=False)
    max_output_tokens: int = Field(
        DEFAULT_MAX_OUTPUT_TOKENS, alias="OPSLOOP_MAX_OUTPUT_TOKENS", gt=0
    )
    context_tokens: int = Field(DEFAULT_CONTEXT_TOKENS, alias="LLM_CONTEXT_TOKENS", gt=0)
    condense_at: float = Field(DEFAULT_CONDENSE_AT, alias="OPSLOOP_CONDENSE_AT", gt=0, le=1)
    temperature: float | None = Field(None, alias="LLM_TEMPERATURE", ge=0, le=2)
    # HTTP behaviour of the shared client (seconds); not in DESIGN's table, all optional.
    connect_timeout_s: float = Field(10.0, alias="LLM_CONNECT_TIMEOUT_S", gt=0)
    read_timeout_s: float = Field(120.0, alias="LLM_READ_TIMEOUT_S", gt=0)
    request_timeout_s: float = Field(300.0, alias="LLM_REQUEST_TIMEOUT_S", gt=0)
    max_connections: int = Field(100, alias="LLM_MAX_CONNECTIONS", gt=0)
    # Stream responses (SSE) so the answer shows while it is written; 0 for endpoints
    # that cannot stream.
    stream: bool = Field(True, alias="LLM_STREAM")

    @field_validator("base_url", "model", "api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    def secret_values(self) -> list[str]:
        return _secret_values(self)

    @property
    def effective_base_url(self) -> str:
        if self.base_url:
            return self.base_url
        return ANTHROPIC_BASE_URL if self.provider == "anthropic" else OPENAI_BASE_URL

    @property
    def condense_at_tokens(self) -> int:
        return int(self.context_tokens * self.condense_at)


class ToolSettings(BaseSettings):
    """Which tools exist: tools.yml, built-in packs, and the limits of the packs."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True)

    tools_file: str | None = Field(None, alias="OPSLOOP_TOOLS")
    packs: str = Field("", alias="OPSLOOP_PACKS")
    http_allow: str = Field("", alias="OPSLOOP_HTTP_ALLOW")
    log_dirs: str = Field("", alias="OPSLOOP_LOG_DIRS")
    prometheus_url: str | None = Field(None, alias="PROMETHEUS_URL")
    alertmanager_url: str | None = Field(None, alias="ALERTMANAGER_URL")
    supervisor_url: str | None = Field(None, alias="SUPERVISOR_URL")
    k8s_context: str | None = Field(None, alias="OPSLOOP_K8S_CONTEXT")
    k8s_namespaces: str = Field("", alias="OPSLOOP_K8S_NAMESPACES")
    postgres_url: str | None = Field(None, alias="POSTGRES_URL")

    @field_validator(
        "tools_file",
        "prometheus_url",
        "alertmanager_url",
        "supervisor_url",
        "k8s_context",
        "postgres_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    def secret_values(self) -> list[str]:
        """The passwords in the packs' backend URLs and POSTGRES_URL (URL or keyword form)."""
        found: list[str] = []
        for url in (self.prometheus_url, self.alertmanager_url, self.supervisor_url):
            if url and (password := urlsplit(url).password):
                found.append(password)
        if self.postgres_url:
            dsn = self.postgres_url
            if "://" in dsn:
                try:
                    password = urlsplit(dsn).password
                except ValueError:
                    password = None
                if password:
                    found.append(unquote(password))
                    found.append(password)
            query = dsn.split("?", 1)[-1]
            found += [unquote(m.group(2).strip("'")) for m in _DSN_PASSWORD.finditer(query)]
        return [v for v in found if v]

    @property
    def pack_names(self) -> list[str]:
        return [p.strip() for p in self.packs.split(",") if p.strip()]


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    name = ".".join(str(p) for p in err["loc"]) or "configuration"
    return f"{name}: {err['msg'].removeprefix('Value error, ')}"


def load_llm_settings() -> LLMSettings:
    """Read the model settings; a bad value raises ``ConfigError`` naming the variable."""
    try:
        return LLMSettings()
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None


def load_tool_settings() -> ToolSettings:
    try:
        return ToolSettings()
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None


DEFAULT_SLACK_API_URL = "https://slack.com/api/"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
DEFAULT_MAX_ITERATIONS = 20
DEFAULT_DEADLINE_S = 3600.0
DEFAULT_TOKEN_BUDGET = 200_000
DEFAULT_APPROVAL_TTL_S = 3600.0
DEFAULT_PORT = 3000
# On shutdown, how long running jobs get to reach a step boundary and hand over: under
# Kubernetes' default 30 s grace period with the HTTP server's own shutdown wait.
DEFAULT_DRAIN_S = 20.0
# A card still pending after this long is recalled once in its thread (0: never).
DEFAULT_APPROVAL_REMIND_S = 600.0
# The assistant pane's suggested prompts ("|" between prompts; Slack shows at most 4).
DEFAULT_SUGGESTED_PROMPTS = (
    "What is firing right now, and what changed before it started?"
    "|Check the health of the service this channel is about"
    "|Summarise this incident so far: impact, cause, what was done"
    "|Which hosts are short on disk or memory?"
)
MAX_SUGGESTED_PROMPTS = 4
DEFAULT_AUDIT_RETENTION_DAYS = 400
DEFAULT_JOBS_PER_USER_HOUR = 30


class BotSettings(BaseSettings):
    """Slack, Redis, job limits and the HTTP listener (DESIGN's configuration table)."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True)

    slack_bot_token: str | None = Field(None, alias="SLACK_BOT_TOKEN", repr=False)
    slack_signing_secret: str | None = Field(None, alias="SLACK_SIGNING_SECRET", repr=False)
    slack_app_token: str | None = Field(None, alias="SLACK_APP_TOKEN", repr=False)
    slack_api_url: str = Field(DEFAULT_SLACK_API_URL, alias="SLACK_API_URL")
    redis_url: str | None = Field(None, alias="REDIS_URL", repr=False)
    redis_prefix: str = Field("opsloop:", alias="OPSLOOP_REDIS_PREFIX", min_length=1)
    redis_mode: Literal["standalone", "cluster", "sentinel"] = Field(
        "standalone", alias="OPSLOOP_REDIS_MODE"
    )
    redis_sentinels: str = Field("", alias="REDIS_SENTINELS")  # host:port,host:port
    redis_sentinel_master: str | None = Field(None, alias="REDIS_SENTINEL_MASTER")
    redis_min_replicas: int = Field(0, alias="OPSLOOP_REDIS_MIN_REPLICAS", ge=0, le=16)
    max_running_jobs: int | None = Field(None, alias="OPSLOOP_MAX_RUNNING_JOBS", gt=0)
    approvers: str = Field("", alias="OPSLOOP_APPROVERS")
    allowed_bots: str = Field("", alias="OPSLOOP_ALLOWED_BOTS")
    max_iterations: int = Field(DEFAULT_MAX_ITERATIONS, alias="OPSLOOP_MAX_ITERATIONS", gt=0)
    deadline_s: float = Field(DEFAULT_DEADLINE_S, alias="OPSLOOP_DEADLINE_S", gt=0)
    token_budget: int = Field(DEFAULT_TOKEN_BUDGET, alias="OPSLOOP_TOKEN_BUDGET", gt=0)
    approval_ttl_s: float = Field(DEFAULT_APPROVAL_TTL_S, alias="OPSLOOP_APPROVAL_TTL_S", gt=0)
    drain_s: float = Field(DEFAULT_DRAIN_S, alias="OPSLOOP_DRAIN_S", ge=0)
    approval_remind_s: float = Field(
        DEFAULT_APPROVAL_REMIND_S, alias="OPSLOOP_APPROVAL_REMIND_S", ge=0
    )
    system_prompt_file: str | None = Field(None, alias="OPSLOOP_SYSTEM_PROMPT")
    task_display: Literal["timeline", "plan", "off"] = Field(
        "timeline", alias="OPSLOOP_TASK_DISPLAY"
    )
    suggested_prompts: str = Field(DEFAULT_SUGGESTED_PROMPTS, alias="OPSLOOP_SUGGESTED_PROMPTS")
    approval_channel: str | None = Field(
        None, alias="OPSLOOP_APPROVAL_CHANNEL", pattern=r"^[CG][A-Z0-9]{1,20}$"
    )
    audit_retention_days: int = Field(
        DEFAULT_AUDIT_RETENTION_DAYS, alias="OPSLOOP_AUDIT_RETENTION_DAYS", gt=0, le=36500
    )
    audit_channel: str | None = Field(
        None, alias="OPSLOOP_AUDIT_CHANNEL", pattern=r"^[CG][A-Z0-9]{1,20}$"
    )
    daily_token_budget: int | None = Field(None, alias="OPSLOOP_DAILY_TOKEN_BUDGET", gt=0)
    daily_cost_usd: float | None = Field(None, alias="OPSLOOP_DAILY_COST_USD", gt=0)
    jobs_per_user_hour: int = Field(
        DEFAULT_JOBS_PER_USER_HOUR, alias="OPSLOOP_JOBS_PER_USER_HOUR", ge=0
    )  # 0: no per-person rate
    prices_file: str | None = Field(None, alias="OPSLOOP_PRICES")
    host: str = Field("0.0.0.0", alias="HOST")
    port: int = Field(DEFAULT_PORT, alias="PORT", gt=0, lt=65536)

    @field_validator(
        "redis_sentinel_master",
        "max_running_jobs",
        "audit_channel",
        "daily_token_budget",
        "daily_cost_usd",
        "prices_file",
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "redis_url",
        "system_prompt_file",
        "approval_channel",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(REDIS_SCHEMES):
            # Named without the value: it may carry a password.
            raise ValueError("must start with " + ", ".join(REDIS_SCHEMES))
        return value

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinel_addresses(cls, value: str) -> str:
        for entry in (e.strip() for e in value.split(",")):
            host, sep, port = entry.rpartition(":")
            if entry and not (sep and host and port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(f"{entry!r} is not host:port (a comma-separated list)")
        return value

    @model_validator(mode="after")
    def _redis_topology(self) -> BotSettings:
        """What each ``OPSLOOP_REDIS_MODE`` needs. In sentinel mode ``REDIS_URL`` is
        optional (``redis://``: no TLS, no password): only its scheme, user, password and
        database are used. Raised as ``ConfigError`` naming the variable (this check
        spans fields, so pydantic's error would name none)."""
        mode = self.redis_mode
        if mode == "sentinel":
            if not self.redis_sentinels.strip(" ,"):
                raise ConfigError("REDIS_SENTINELS: required with OPSLOOP_REDIS_MODE=sentinel")
            if not self.redis_sentinel_master:
                raise ConfigError(
                    "REDIS_SENTINEL_MASTER: required with OPSLOOP_REDIS_MODE=sentinel"
                )
            if self.redis_url is None:
                self.redis_url = "redis://"
        elif mode == "cluster":
            if self.redis_url is None:
                raise ConfigError(
                    "REDIS_URL: required with OPSLOOP_REDIS_MODE=cluster (any node of the cluster)"
                )
            if self.redis_url.startswith("unix://"):
                raise ConfigError(
                    "REDIS_URL: a cluster is reached over TCP (redis:// or rediss://)"
                )
        return self

    @field_validator("slack_api_url")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        # slack-sdk joins base URL and method with urljoin: without the slash the last
        # path segment is dropped.
        return value if value.endswith("/") else value + "/"

    def secret_values(self) -> list[str]:
        return _secret_values(self)

    @property
    def approver_ids(self) -> list[str]:
        return [a.strip() for a in self.approvers.split(",") if a.strip()]

    @property
    def suggested_prompt_list(self) -> list[str]:
        """The pane's suggested prompts, at most ``MAX_SUGGESTED_PROMPTS``."""
        prompts = [p.strip() for p in self.suggested_prompts.split("|") if p.strip()]
        return prompts[:MAX_SUGGESTED_PROMPTS]

    @property
    def allowed_bot_ids(self) -> frozenset[str]:
        """Bot ids (``B…``) whose mentions and replies are taken like a person's."""
        return frozenset(b.strip() for b in self.allowed_bots.split(",") if b.strip())

    def require(self, *names: str) -> None:
        """``ConfigError`` naming the first of these variables that is not set."""
        for name in names:
            field = next(
                (f for f, info in type(self).model_fields.items() if info.alias == name), None
            )
            if field is None or getattr(self, field) in (None, ""):
                raise ConfigError(f"{name}: required")


def load_bot_settings() -> BotSettings:
    try:
        return BotSettings()
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None


class OtelSettings(BaseSettings):
    """Whether jobs are traced with OpenTelemetry (README "OpenTelemetry traces"). The SDK
    reads the rest of the standard ``OTEL_*`` variables itself (headers, service name,
    resource attributes, sampler, batch queue); these are the ones that switch it on."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True)

    endpoint: str | None = Field(None, alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    traces_endpoint: str | None = Field(None, alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    traces_exporter: str | None = Field(None, alias="OTEL_TRACES_EXPORTER")
    sdk_disabled: bool = Field(False, alias="OTEL_SDK_DISABLED")
    capture_content: bool = Field(False, alias="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")

    @property
    def enabled(self) -> bool:
        """On when ``OTEL_TRACES_EXPORTER=otlp``, or when an OTLP endpoint is set and
        ``OTEL_TRACES_EXPORTER`` does not say otherwise; never with ``OTEL_SDK_DISABLED``."""
        if self.sdk_disabled:
            return False
        exporters = {e.strip() for e in (self.traces_exporter or "").split(",") if e.strip()}
        if exporters:
            return "otlp" in exporters
        return bool(self.endpoint or self.traces_endpoint)


def load_otel_settings() -> OtelSettings:
    try:
        return OtelSettings()
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None
