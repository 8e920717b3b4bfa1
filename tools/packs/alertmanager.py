"""The ``alertmanager`` pack: alerts and silences through Alertmanager's API v2.

``alertmanager_alerts`` and ``alertmanager_silences`` are read-only;
``alertmanager_create_silence`` and ``alertmanager_expire_silence`` are mutating, so each
call waits for an Approve card. A silence's ``createdBy`` is the approver's Slack id
(``confirmed_by``), which the model cannot set; its duration is 1 minute to 7 days and it
starts now. ``ALERTMANAGER_URL`` is the base URL (path prefix and basic auth kept). The
HTTP client and its error messages are the prometheus pack's ``Backend``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from bot.agent.tools import Tool
from bot.errors import ToolError
from tools.base import tool
from tools.packs import Pack, PackConfig
from tools.packs.backend import (
    TOOL_TIMEOUT_S,
    Backend,
    ago,
    annotation,
    backend_pack,
    clip,
    iso,
    labels_text,
    listing,
    parse_time,
    plural,
)
from tools.packs.prometheus import severity_rank

MAX_ALERTS = 30
MAX_SILENCES = 30
MAX_SILENCE_MINUTES = 7 * 24 * 60
MAX_MATCHERS = 20
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
# Alertmanager's state names, in the order they are listed.
_ALERT_ORDER = {"active": 0, "unprocessed": 1, "suppressed": 2}
_SILENCE_ORDER = {"active": 0, "pending": 1}


class Matcher(BaseModel):
    """One label matcher of a silence: ``name="value"``, or ``name=~"regex"``."""

    model_config = ConfigDict(extra="forbid", regex_engine="python-re")

    name: Annotated[
        str,
        Field(
            pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$",
            max_length=200,
            description="Label name, e.g. alertname, instance, job, severity.",
        ),
    ]
    value: Annotated[
        str,
        Field(
            max_length=1000,
            description="The value to match exactly, or a regular expression if is_regex.",
        ),
    ]
    is_regex: bool = Field(
        default=False,
        description="Match value as a regular expression anchored at both ends.",
    )

    @model_validator(mode="after")
    def _regex_compiles(self) -> Matcher:
        if self.is_regex:
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValueError(
                    f"value {self.value!r} is not a valid regular expression: {exc}"
                ) from None
        return self

    def matches_empty(self) -> bool:
        """Whether a missing label would match (Alertmanager forbids silences of only such)."""
        if self.is_regex:
            return re.fullmatch(self.value, "") is not None
        return self.value == ""

    def wire(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "isRegex": self.is_regex, "isEqual": True}


def _not_everything(matchers: list[Matcher]) -> list[Matcher]:
    if all(m.matches_empty() for m in matchers):
        raise ValueError(
            "at least one matcher must not match the empty string, or the silence "
            "would silence every alert"
        )
    return matchers


Matchers = Annotated[
    list[Matcher],
    Field(min_length=1, max_length=MAX_MATCHERS),
    AfterValidator(_not_everything),
]
SilenceMinutes = Annotated[int, Field(ge=1, le=MAX_SILENCE_MINUTES)]
Comment = Annotated[str, Field(min_length=1, max_length=500, pattern=r"\S")]
SilenceId = Annotated[str, Field(pattern=UUID_PATTERN)]


def build(config: PackConfig) -> Pack:
    """The pack against ``ALERTMANAGER_URL``; ``ConfigError`` when it is missing or bad."""
    return backend_pack(
        "alertmanager",
        config.alertmanager_url,
        variable="ALERTMANAGER_URL",
        tools_of=alertmanager_tools,
    )


def alertmanager_tools(backend: Backend) -> list[Tool]:
    """The four tools over one backend (tests build them with short timeouts)."""
    api = Alertmanager(backend)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def alertmanager_alerts() -> str:
        """List the alerts Alertmanager holds: active first (the most severe first), then
        suppressed (silenced or inhibited, with the silence id), each with labels, since
        when and its summary (at most 30)."""
        return await api.alerts()

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def alertmanager_silences() -> str:
        """List active and pending silences: id, matchers, when each ends, who created it
        and its comment (at most 30; expired ones are only counted)."""
        return await api.silences()

    @tool(category="mutating", timeout=TOOL_TIMEOUT_S)
    async def alertmanager_create_silence(
        matchers: Matchers, minutes: SilenceMinutes, comment: Comment, confirmed_by: str
    ) -> str:
        """Silence the alerts matching all the matchers, from now for the given minutes.
        The approver becomes the silence's createdBy. Returns the silence id and how many
        current alerts it silences.

        Args:
            matchers: Label matchers; an alert is silenced when all of them match, e.g.
                [{"name": "alertname", "value": "DiskFull"}, {"name": "instance",
                "value": "web-0[1-3]", "is_regex": true}].
            minutes: How long the silence lasts, 1 to 10080 (7 days).
            comment: Why, for whoever sees the silence later (an incident link helps).
        """
        return await api.create_silence(matchers, minutes, comment, confirmed_by)

    @tool(category="mutating", timeout=TOOL_TIMEOUT_S)
    async def alertmanager_expire_silence(silence_id: SilenceId) -> str:
        """Expire (end now) a silence, so its alerts notify again.

        Args:
            silence_id: The silence's id as alertmanager_silences lists it (a UUID).
        """
        return await api.expire_silence(silence_id)

    return [
        alertmanager_alerts,
        alertmanager_silences,
        alertmanager_create_silence,
        alertmanager_expire_silence,
    ]


class Alertmanager:
    """The API v2 calls and their summaries."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def _list(self, path: str) -> list[dict[str, Any]]:
        body = await self.backend.call("GET", path)
        if not isinstance(body, list):
            raise ToolError(f"alertmanager answered {path} with {clip(str(body))}, not a list")
        return [item for item in body if isinstance(item, dict)]

    async def alerts(self) -> str:
        return alerts_summary(await self._list("/api/v2/alerts"), datetime.now(UTC))

    async def silences(self) -> str:
        return silences_summary(await self._list("/api/v2/silences"), datetime.now(UTC))

    async def create_silence(
        self, matchers: Sequence[Matcher], minutes: int, comment: str, confirmed_by: str
    ) -> str:
        if not confirmed_by.strip():
            raise ToolError("a silence needs an approver; this call carries none")
        start = datetime.now(UTC)
        end = start + timedelta(minutes=minutes)
        body = {
            "matchers": [m.wire() for m in matchers],
            "startsAt": _rfc3339(start),
            "endsAt": _rfc3339(end),
            "createdBy": confirmed_by,
            "comment": comment,
        }
        answer = await self.backend.call("POST", "/api/v2/silences", json_body=body)
        silence_id = answer.get("silenceID") if isinstance(answer, dict) else None
        if not isinstance(silence_id, str) or not silence_id:
            raise ToolError(f"alertmanager created no silence id: {clip(str(answer))}")
        what = matchers_text([m.wire() for m in matchers])
        text = (
            f"created silence {silence_id} for {what} until {iso(end.timestamp())} "
            f"({minutes} min), createdBy {confirmed_by}"
        )
        try:  # Alertmanager marks silenced alerts as it lists them: the count is current
            alerts = await self._list("/api/v2/alerts")
        except ToolError as exc:
            return f"{text}; could not count the alerts it silences: {exc}"
        hit = sum(1 for a in alerts if silence_id in _status(a).get("silencedBy", ()))
        text += f"; it silences {plural(hit, 'current alert')}"
        if not hit:
            text += " (check the label names and values if you expected some)"
        return text

    async def expire_silence(self, silence_id: str) -> str:
        silence = await self.backend.call("GET", f"/api/v2/silence/{silence_id}")
        if not isinstance(silence, dict):
            raise ToolError(f"alertmanager answered {clip(str(silence))} for silence {silence_id}")
        about = _silence_about(silence)
        if _state(silence) == "expired":
            ended = parse_time(silence.get("endsAt"))
            when = f" at {iso(ended.timestamp())}" if ended else ""
            return f"silence {silence_id} had already expired{when}; nothing changed ({about})"
        await self.backend.call("DELETE", f"/api/v2/silence/{silence_id}")
        return f"expired silence {silence_id} ({about}); its alerts notify again"


def alerts_summary(alerts: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """``/api/v2/alerts`` as ``alertmanager_alerts`` answers: active first."""
    if not alerts:
        return "no alerts"
    ordered = sorted(
        alerts,
        key=lambda a: (
            _ALERT_ORDER.get(_state(a), 3),
            severity_rank(a),
            str(a.get("startsAt", "")),
        ),
    )
    lines = [_alert_line(alert, now) for alert in ordered]
    counts = {state: sum(1 for a in ordered if _state(a) == state) for state in _ALERT_ORDER}
    head = f"{plural(len(ordered), 'alert')}: {counts['active']} active, "
    head += f"{counts['suppressed']} suppressed"
    if counts["unprocessed"]:
        head += f", {counts['unprocessed']} unprocessed"
    return listing(head, lines, MAX_ALERTS)


def silences_summary(silences: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """``/api/v2/silences`` as ``alertmanager_silences`` answers: active ones first,
    those ending soonest first; expired ones only counted."""
    current = [s for s in silences if _state(s) in _SILENCE_ORDER]
    expired = len(silences) - len(current)
    tail = f" ({expired} expired not shown)" if expired else ""
    if not current:
        return f"no active or pending silences{tail}"
    current.sort(key=lambda s: (_SILENCE_ORDER[_state(s)], str(s.get("endsAt", ""))))
    lines = [_silence_line(silence, now) for silence in current]
    pending = sum(1 for s in current if _state(s) == "pending")
    head = f"{plural(len(current), 'silence')}: {len(current) - pending} active, "
    head += f"{pending} pending{tail}"
    return listing(head, lines, MAX_SILENCES)


def matchers_text(matchers: Sequence[Mapping[str, Any]]) -> str:
    """``alertname="DiskFull",instance=~"web-.*"`` from API v2 matchers."""
    parts = []
    for m in matchers:
        regex, equal = bool(m.get("isRegex")), m.get("isEqual", True) is not False
        op = ("=~" if equal else "!~") if regex else ("=" if equal else "!=")
        value = json.dumps(clip(str(m.get("value", "")), 100), ensure_ascii=False)
        parts.append(f"{m.get('name', '?')}{op}{value}")
    return ",".join(parts)


def _alert_line(alert: Mapping[str, Any], now: datetime) -> str:
    labels = dict(alert.get("labels") or {})
    name = labels.pop("alertname", "?")
    line = f"{_state(alert)} {name}{labels_text(labels)}"
    if since := parse_time(alert.get("startsAt")):
        line += f" since {iso(since.timestamp())} ({ago(since, now)})"
    status = _status(alert)
    if silenced := status.get("silencedBy"):
        line += f" silenced by {', '.join(map(str, silenced))}"
    if inhibited := status.get("inhibitedBy"):
        line += f" inhibited by {', '.join(map(str, inhibited))}"
    if text := annotation(alert.get("annotations")):
        line += f": {text}"
    return line


def _silence_line(silence: Mapping[str, Any], now: datetime) -> str:
    line = f"{silence.get('id', '?')} {_state(silence)}"
    starts, ends = parse_time(silence.get("startsAt")), parse_time(silence.get("endsAt"))
    if _state(silence) == "pending" and starts:
        line += f" from {iso(starts.timestamp())} ({ago(starts, now)})"
    if ends:
        line += f" until {iso(ends.timestamp())} ({ago(ends, now)})"
    return f"{line} {_silence_about(silence)}"


def _silence_about(silence: Mapping[str, Any]) -> str:
    matchers = silence.get("matchers") or []
    who = clip(str(silence.get("createdBy") or "?"), 80)
    return f"{matchers_text(matchers)} by {who}: {clip(str(silence.get('comment') or ''))}"


def _status(item: Mapping[str, Any]) -> Mapping[str, Any]:
    status = item.get("status")
    return status if isinstance(status, dict) else {}


def _state(item: Mapping[str, Any]) -> str:
    return str(_status(item).get("state", "unknown"))


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
