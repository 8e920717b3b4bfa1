"""Configuration from the environment: the only module that reads it.

Each group is a pydantic-settings model with the exact variable names of docs/configuration.md's
configuration table; defaults are named constants. A missing or malformed variable
becomes a ``ConfigError`` naming it (``load_*_settings``, for code that needs one group);
``examine`` reads every group in one pass and returns every ``Problem`` at once, each
beside what its variable is for (``PURPOSES``), for the commands a newcomer starts with
(``opsloop check``, ``serve``, ``socket``: ``bot/cli/settings_problems.py`` prints them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar
from urllib.parse import unquote, urlsplit

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
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


def _empty_is_unset(value: object) -> object:
    return None if value == "" else value


# Optional values for which an empty variable (``X=``) counts as not set.
MaybeStr = Annotated[str | None, BeforeValidator(_empty_is_unset)]
MaybeInt = Annotated[int | None, BeforeValidator(_empty_is_unset)]
MaybeFloat = Annotated[float | None, BeforeValidator(_empty_is_unset)]


class _Group(BaseSettings):
    """What every group shares: the exact variable names, unknown ones ignored."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True)

    def secret_values(self) -> list[str]:
        return _secret_values(self)


class LLMSettings(_Group):
    """The model endpoint(s): ``LLM_*``, fallback endpoints, context and output sizes."""

    provider: Literal["openai", "anthropic"] = Field("openai", alias="LLM_PROVIDER")
    base_url: MaybeStr = Field(None, alias="LLM_BASE_URL")
    api_key: MaybeStr = Field(None, alias="LLM_API_KEY", repr=False)
    model: MaybeStr = Field(None, alias="LLM_MODEL")
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

    @property
    def effective_base_url(self) -> str:
        if self.base_url:
            return self.base_url
        return ANTHROPIC_BASE_URL if self.provider == "anthropic" else OPENAI_BASE_URL

    @property
    def condense_at_tokens(self) -> int:
        return int(self.context_tokens * self.condense_at)


class ToolSettings(_Group):
    """Which tools exist: tools.yml, built-in packs, and the limits of the packs."""

    tools_file: MaybeStr = Field(None, alias="OPSLOOP_TOOLS")
    packs: str = Field("", alias="OPSLOOP_PACKS")
    http_allow: str = Field("", alias="OPSLOOP_HTTP_ALLOW")
    log_dirs: str = Field("", alias="OPSLOOP_LOG_DIRS")
    prometheus_url: MaybeStr = Field(None, alias="PROMETHEUS_URL")
    alertmanager_url: MaybeStr = Field(None, alias="ALERTMANAGER_URL")
    supervisor_url: MaybeStr = Field(None, alias="SUPERVISOR_URL")
    k8s_context: MaybeStr = Field(None, alias="OPSLOOP_K8S_CONTEXT")
    k8s_namespaces: str = Field("", alias="OPSLOOP_K8S_NAMESPACES")
    postgres_url: MaybeStr = Field(None, alias="POSTGRES_URL")

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


@dataclass(frozen=True, slots=True)
class Problem:
    """One missing or invalid variable: its name and what is wrong (never its value)."""

    variable: str
    message: str

    @classmethod
    def of(cls, text: str) -> Problem:
        """From a ``ConfigError``'s ``NAME: what is wrong``."""
        variable, _, message = text.partition(": ")
        return cls(variable, message) if message else cls("configuration", text)

    @property
    def text(self) -> str:
        return f"{self.variable}: {self.message}"

    def line(self) -> str:
        """``NAME: what is wrong — what the variable is for``."""
        purpose = PURPOSES.get(self.variable)
        return f"{self.text} — {purpose}" if purpose else self.text


def _problems(exc: ValidationError) -> list[Problem]:
    return [
        Problem(
            ".".join(str(p) for p in err["loc"]) or "configuration",
            err["msg"].removeprefix("Value error, "),
        )
        for err in exc.errors()
    ]


def _first_error(exc: ValidationError) -> str:
    return _problems(exc)[0].text


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


def redis_topology_problems(
    mode: str, sentinels: str, master: str | None, url: str | None
) -> list[Problem]:
    """What ``OPSLOOP_REDIS_MODE`` needs and is missing (every problem, not the first)."""
    found: list[Problem] = []
    if mode == "sentinel":
        if not sentinels.strip(" ,"):
            found.append(Problem("REDIS_SENTINELS", "required with OPSLOOP_REDIS_MODE=sentinel"))
        if not master:
            found.append(
                Problem("REDIS_SENTINEL_MASTER", "required with OPSLOOP_REDIS_MODE=sentinel")
            )
    elif mode == "cluster":
        if url is None:
            found.append(
                Problem(
                    "REDIS_URL",
                    "required with OPSLOOP_REDIS_MODE=cluster (any node of the cluster)",
                )
            )
        elif url.startswith("unix://"):
            found.append(
                Problem("REDIS_URL", "a cluster is reached over TCP (redis:// or rediss://)")
            )
    return found


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
DEFAULT_ALERT_INVESTIGATIONS_PER_HOUR = 20
DEFAULT_JOBS_PER_USER_HOUR = 30
DEFAULT_INCIDENT_RETENTION_DAYS = 180


class BotSettings(_Group):
    """Slack, Redis, job limits and the HTTP listener (DESIGN's configuration table)."""

    slack_bot_token: MaybeStr = Field(None, alias="SLACK_BOT_TOKEN", repr=False)
    slack_signing_secret: MaybeStr = Field(None, alias="SLACK_SIGNING_SECRET", repr=False)
    slack_app_token: MaybeStr = Field(None, alias="SLACK_APP_TOKEN", repr=False)
    slack_api_url: str = Field(DEFAULT_SLACK_API_URL, alias="SLACK_API_URL")
    redis_url: MaybeStr = Field(None, alias="REDIS_URL", repr=False)
    redis_prefix: str = Field("opsloop:", alias="OPSLOOP_REDIS_PREFIX", min_length=1)
    redis_mode: Literal["standalone", "cluster", "sentinel"] = Field(
        "standalone", alias="OPSLOOP_REDIS_MODE"
    )
    redis_sentinels: str = Field("", alias="REDIS_SENTINELS")  # host:port,host:port
    redis_sentinel_master: MaybeStr = Field(None, alias="REDIS_SENTINEL_MASTER")
    redis_min_replicas: int = Field(0, alias="OPSLOOP_REDIS_MIN_REPLICAS", ge=0, le=16)
    max_running_jobs: MaybeInt = Field(None, alias="OPSLOOP_MAX_RUNNING_JOBS", gt=0)
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
    approval_escalate: str = Field("", alias="OPSLOOP_APPROVAL_ESCALATE")
    system_prompt_file: MaybeStr = Field(None, alias="OPSLOOP_SYSTEM_PROMPT")
    task_display: Literal["timeline", "plan", "off"] = Field(
        "timeline", alias="OPSLOOP_TASK_DISPLAY"
    )
    suggested_prompts: str = Field(DEFAULT_SUGGESTED_PROMPTS, alias="OPSLOOP_SUGGESTED_PROMPTS")
    approval_channel: MaybeStr = Field(
        None, alias="OPSLOOP_APPROVAL_CHANNEL", pattern=r"^[CG][A-Z0-9]{1,20}$"
    )
    audit_retention_days: int = Field(
        DEFAULT_AUDIT_RETENTION_DAYS, alias="OPSLOOP_AUDIT_RETENTION_DAYS", gt=0, le=36500
    )
    audit_channel: MaybeStr = Field(
        None, alias="OPSLOOP_AUDIT_CHANNEL", pattern=r"^[CG][A-Z0-9]{1,20}$"
    )
    daily_token_budget: MaybeInt = Field(None, alias="OPSLOOP_DAILY_TOKEN_BUDGET", gt=0)
    daily_cost_usd: MaybeFloat = Field(None, alias="OPSLOOP_DAILY_COST_USD", gt=0)
    jobs_per_user_hour: int = Field(
        DEFAULT_JOBS_PER_USER_HOUR, alias="OPSLOOP_JOBS_PER_USER_HOUR", ge=0
    )  # 0: no per-person rate
    prices_file: MaybeStr = Field(None, alias="OPSLOOP_PRICES")
    # Alerts in (``POST /alerts/alertmanager``): off without the token.
    alerts_token: MaybeStr = Field(None, alias="OPSLOOP_ALERTS_TOKEN", repr=False)
    alerts_file: MaybeStr = Field(None, alias="OPSLOOP_ALERTS")
    alerts_channel: MaybeStr = Field(None, alias="OPSLOOP_ALERTS_CHANNEL")
    alert_investigations_per_hour: int = Field(
        DEFAULT_ALERT_INVESTIGATIONS_PER_HOUR,
        alias="OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR",
        ge=0,
    )  # workspace-wide; 0: none start by themselves
    # Team knowledge: the runbooks folder (and where it is published), incident records.
    runbooks_dir: MaybeStr = Field(None, alias="OPSLOOP_RUNBOOKS")
    runbooks_url: MaybeStr = Field(None, alias="OPSLOOP_RUNBOOKS_URL", pattern=r"^https?://\S+$")
    incident_retention_days: int = Field(
        DEFAULT_INCIDENT_RETENTION_DAYS, alias="OPSLOOP_INCIDENT_RETENTION_DAYS", gt=0, le=36500
    )
    host: str = Field("0.0.0.0", alias="HOST")
    port: int = Field(DEFAULT_PORT, alias="PORT", gt=0, lt=65536)

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
        found = redis_topology_problems(
            self.redis_mode, self.redis_sentinels, self.redis_sentinel_master, self.redis_url
        )
        if found:
            raise ConfigError(found[0].text)
        if self.redis_mode == "sentinel" and self.redis_url is None:
            self.redis_url = "redis://"
        return self

    @field_validator("approval_escalate")
    @classmethod
    def _escalate(cls, value: str) -> str:
        ids = [a.strip() for a in value.split(",") if a.strip()]
        groups = [a for a in ids if a.startswith("S")]
        if any(not re.fullmatch(r"[UWS][A-Z0-9]{2,20}", a) for a in ids):
            raise ValueError("user ids (U…, W…) or one user group id (S…), comma-separated")
        if groups and len(ids) > 1:
            raise ValueError("one user group id (S…) alone, or user ids (U…, W…)")
        return ",".join(ids)

    @field_validator("slack_api_url")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        # slack-sdk joins base URL and method with urljoin: without the slash the last
        # path segment is dropped.
        return value if value.endswith("/") else value + "/"

    @property
    def approver_ids(self) -> list[str]:
        return [a.strip() for a in self.approvers.split(",") if a.strip()]

    @property
    def escalate_ids(self) -> tuple[str, ...]:
        """``OPSLOOP_APPROVAL_ESCALATE``: who a still pending card's reminder mentions."""
        return tuple(a for a in self.approval_escalate.split(",") if a)

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


class OtelSettings(_Group):
    """Whether jobs are traced with OpenTelemetry (docs/operations.md, "OpenTelemetry
    traces"). The SDK reads the rest of the standard ``OTEL_*`` variables itself (headers,
    service name, resource attributes, sampler, batch queue); these are the ones that switch
    it on."""

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


# -- every problem at once ----------------------------------------------------------------

# What each variable is for, one line each: ``opsloop check`` and ``serve`` print it beside a
# missing or invalid variable (docs/configuration.md says more).
PURPOSES: Mapping[str, str] = {
    "SLACK_BOT_TOKEN": "the app's bot token (xoxb-…), from its OAuth & Permissions page",
    "SLACK_SIGNING_SECRET": "proves a request came from Slack (the app's Basic Information)",
    "SLACK_APP_TOKEN": "Socket Mode's app-level token (xapp-…) with connections:write",
    "SLACK_API_URL": "the Slack Web API base URL",
    "REDIS_URL": "the Redis that holds jobs, history and approvals (redis://, rediss://, unix://)",
    "OPSLOOP_REDIS_PREFIX": "the prefix of every Redis key",
    "OPSLOOP_REDIS_MODE": "the Redis topology: standalone, cluster or sentinel",
    "REDIS_SENTINELS": "sentinel mode: the sentinels, host:port,…",
    "REDIS_SENTINEL_MASTER": "sentinel mode: the name of the master the sentinels watch",
    "OPSLOOP_REDIS_MIN_REPLICAS": "replicas each acknowledged write waits for",
    "OPSLOOP_MAX_RUNNING_JOBS": "jobs one process runs at once",
    "OPSLOOP_APPROVERS": "user ids (U…) and user group ids (S…) who may approve a change",
    "OPSLOOP_ALLOWED_BOTS": "bot ids (B…) whose mentions and replies are taken like a person's",
    "OPSLOOP_MAX_ITERATIONS": "a job's limit on model calls",
    "OPSLOOP_DEADLINE_S": "a job's limit on active time, in seconds",
    "OPSLOOP_TOKEN_BUDGET": "a job's limit on model tokens",
    "OPSLOOP_APPROVAL_TTL_S": "how long an approval card stays valid, in seconds",
    "OPSLOOP_DRAIN_S": "on SIGTERM, how long running jobs get to hand over, in seconds",
    "OPSLOOP_APPROVAL_REMIND_S": "when a still pending card is recalled in its thread (0: never)",
    "OPSLOOP_APPROVAL_ESCALATE": "user ids (U…) or one user group (S…) the recall mentions",
    "OPSLOOP_SYSTEM_PROMPT": "a file replacing the built-in incident-response prompt",
    "OPSLOOP_TASK_DISPLAY": "how a job's tool steps show: timeline, plan or off",
    "OPSLOOP_SUGGESTED_PROMPTS": "the assistant pane's suggested prompts, | between them",
    "OPSLOOP_APPROVAL_CHANNEL": "a channel (C…) for the cards of jobs asked for in the pane",
    "OPSLOOP_AUDIT_RETENTION_DAYS": "how long the audit log keeps an entry, in days",
    "OPSLOOP_AUDIT_CHANNEL": "a channel (C…) that also gets every decision and write",
    "OPSLOOP_DAILY_TOKEN_BUDGET": "the workspace's daily cap on model tokens",
    "OPSLOOP_DAILY_COST_USD": "the workspace's daily cap on model cost, in US dollars",
    "OPSLOOP_JOBS_PER_USER_HOUR": "new jobs one person may start per hour (0: no limit)",
    "OPSLOOP_PRICES": "a file of per-model prices for models the price table does not know",
    "OPSLOOP_ALERTS_TOKEN": "the bearer token of POST /alerts/alertmanager (unset: off)",
    "OPSLOOP_ALERTS": "a YAML file of alert routes: which channel, whether to investigate",
    "OPSLOOP_ALERTS_CHANNEL": "the channel (C…) alerts go to without routes",
    "OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR": "investigations alerts start per hour, workspace-wide",
    "OPSLOOP_RUNBOOKS": "a folder of Markdown runbooks the agent searches and reads",
    "OPSLOOP_RUNBOOKS_URL": "the base URL the runbooks folder is published at (runbook_url)",
    "OPSLOOP_INCIDENT_RETENTION_DAYS": "how long incident records are kept for search",
    "HOST": "the address serve listens on",
    "PORT": "the port serve listens on (socket: health and metrics)",
    "LLM_PROVIDER": "the model API: openai (any OpenAI-compatible endpoint) or anthropic",
    "LLM_BASE_URL": "the model endpoint's base URL",
    "LLM_API_KEY": "the model endpoint's API key",
    "LLM_MODEL": "the name of the model that investigates (gpt-4o, claude-sonnet-4-5, …)",
    "LLM_FALLBACK_MODELS": "models tried in turn when the primary fails, comma-separated",
    "OPENAI_BASE_URL": "the endpoint of openai:NAME fallbacks",
    "OPENAI_API_KEY": "the key of openai:NAME fallbacks",
    "ANTHROPIC_BASE_URL": "the endpoint of anthropic:NAME fallbacks",
    "ANTHROPIC_API_KEY": "the key of anthropic:NAME fallbacks",
    "OPSLOOP_MAX_OUTPUT_TOKENS": "the most output one model call may write",
    "LLM_CONTEXT_TOKENS": "the model's context size, in tokens",
    "OPSLOOP_CONDENSE_AT": "the share of the context (0 to 1) at which history is condensed",
    "LLM_TEMPERATURE": "the model's sampling temperature (0 to 2)",
    "LLM_CONNECT_TIMEOUT_S": "how long connecting to the model endpoint may take, in seconds",
    "LLM_READ_TIMEOUT_S": "how long the model endpoint may stay silent, in seconds",
    "LLM_REQUEST_TIMEOUT_S": "how long one model request may take in all, in seconds",
    "LLM_MAX_CONNECTIONS": "connections open to the model endpoints at most",
    "LLM_STREAM": "stream model answers (0 for endpoints that cannot)",
    "OPSLOOP_TOOLS": "a tools.yml: your own tools and per-channel allowlists",
    "OPSLOOP_PACKS": "built-in tool packs to enable, e.g. host,http",
    "OPSLOOP_HTTP_ALLOW": "the hosts http tools may reach",
    "OPSLOOP_LOG_DIRS": "the directories the host pack may tail logs in",
    "PROMETHEUS_URL": "the prometheus pack's server",
    "ALERTMANAGER_URL": "the alertmanager pack's server",
    "SUPERVISOR_URL": "the supervisor pack's XML-RPC endpoint",
    "OPSLOOP_K8S_CONTEXT": "the kubernetes pack's kubeconfig context",
    "OPSLOOP_K8S_NAMESPACES": "the only namespaces the kubernetes pack may touch",
    "POSTGRES_URL": "the postgres pack's database",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "where OpenTelemetry traces are sent (OTLP/HTTP)",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "where OpenTelemetry traces are sent, traces only",
    "OTEL_TRACES_EXPORTER": "otlp turns traces on, none off",
    "OTEL_SDK_DISABLED": "true turns OpenTelemetry off",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "put message text in the traces",
}


@dataclass(frozen=True, slots=True)
class Examined:
    """Every settings group as far as it could be read (``None``: invalid), and every
    problem found."""

    bot: BotSettings | None
    llm: LLMSettings | None
    tools: ToolSettings | None
    otel: OtelSettings | None
    problems: list[Problem]


def examine(*, required: Sequence[str] = ()) -> Examined:
    """Every settings group read in one pass, with every problem found — the ``required``
    variables that are unset, then each group's invalid values, then what the Redis
    topology lacks — each variable once (its first problem)."""
    invalid: list[Problem] = []
    bot = _read(BotSettings, invalid)
    llm, tools = _read(LLMSettings, invalid), _read(ToolSettings, invalid)
    otel = _read(OtelSettings, invalid)
    sentinel = _raw("OPSLOOP_REDIS_MODE") == "sentinel"
    if bot is None:  # its fields failed, so its topology check did not run: run it here
        invalid += redis_topology_problems(
            _raw("OPSLOOP_REDIS_MODE") or "standalone",
            _raw("REDIS_SENTINELS") or "",
            _raw("REDIS_SENTINEL_MASTER"),
            _raw("REDIS_URL"),
        )
    read = [g for g in (bot, llm, tools, otel) if g is not None]
    missing = [
        Problem(name, "required")
        for name in dict.fromkeys(required)
        if _unset(name, read, sentinel=sentinel)
    ]
    found: dict[str, Problem] = {}
    for problem in [*missing, *invalid]:
        found.setdefault(problem.variable, problem)
    return Examined(bot, llm, tools, otel, list(found.values()))


S = TypeVar("S", bound=BaseSettings)


def _read(model: type[S], problems: list[Problem]) -> S | None:
    """One group, or ``None`` with its problems added to ``problems``."""
    try:
        return model()
    except ValidationError as exc:
        problems += _problems(exc)
    except ConfigError as exc:  # BotSettings' topology, its fields being valid
        problems.append(Problem.of(str(exc)))
    return None


def _raw(name: str) -> str | None:
    """A variable as set (empty is unset), for the checks a failed group could not run."""
    return os.environ.get(name) or None


def _unset(name: str, groups: Sequence[BaseSettings], *, sentinel: bool) -> bool:
    for group in groups:
        for field, info in type(group).model_fields.items():
            if info.alias == name:
                return getattr(group, field) in (None, "")
    if name == "REDIS_URL" and sentinel:  # sentinel mode finds the master without it
        return False
    return _raw(name) is None
