"""The tools.yml format, and loading it with errors that name file, tool and line.

    tools:
      - name: restart_service          # ^[a-zA-Z0-9_-]{1,64}$, unique in the file
        description: Restart a systemd service on a host.
        kind: command                  # command (default) | http
        category: mutating             # read_only | mutating | destructive
        parallel: false                # only meaningful for read_only
        timeout: 30                    # seconds
        output_bound: 4000             # characters the model sees
        params:
          host: {type: string, enum: [web-01, web-02], description: Host name}
        run: ["ssh", "{host}", "sudo", "systemctl", "restart", "{service}"]
        env: {TOKEN: "${DEPLOY_TOKEN}"}   # values may reference the bot's environment
        cwd: /srv
      - name: status_api
        kind: http
        params: {url: {type: string, pattern: "^https?://"}}
        request: {method: GET, url: "{url}", headers: {}, body: null, select: "data.status"}
    toolsets:                          # optional named groups, besides the pack names
      diagnostics: [status_api, host_cpu]
    channels:                          # optional per-channel allowlists (default: all)
      C0123: [diagnostics, restart_service]
    mcp_servers:                       # Model Context Protocol servers (tools/mcp/)
      - name: k8s                      # ^[a-z][a-z0-9_]{0,19}$; tools offered as k8s_<tool>
        command: ["kubernetes-mcp-server"]   # stdio (argv, no shell) — or url: (HTTP)
        env: {KUBECONFIG: "${KUBECONFIG}"}
        timeout: 30                    # seconds per call
        trust_annotations: false       # readOnlyHint counts only when true
        include: [pods_list]           # or exclude: [...]
        tools: {pods_list: {category: read_only, parallel: true}}

Unknown keys, bad patterns, duplicate names and templates naming missing parameters are
configuration errors, reported at start-up as ``file:line: tool 'name': problem``
(``file:line: mcp server 'name': problem`` for an MCP server entry).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    model_validator,
)

from bot.agent.tools import DEFAULT_OUTPUT_BOUND, DEFAULT_TIMEOUT_S, NAME_PATTERN
from bot.errors import ConfigError
from tools.env import check_env, parse_env_value

RESERVED = frozenset({"confirmed_by", "idempotency_key"})  # template variables of their own
MAX_TIMEOUT_S = 3600.0

_STRICT = ConfigDict(extra="forbid")


class ParamSpec(BaseModel):
    """One parameter: its type and the constraints checked before anything runs."""

    model_config = _STRICT

    type: Literal["string", "integer", "number", "boolean"] = "string"
    description: str | None = None
    enum: list[str | int | float | bool] | None = None
    pattern: str | None = None
    min: float | None = None
    max: float | None = None
    default: str | int | float | bool | None = None
    required: bool | None = None  # default: required unless a default is given

    @model_validator(mode="after")
    def _check(self) -> ParamSpec:
        if self.pattern is not None:
            if self.type != "string":
                raise ValueError("pattern applies to string parameters only")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"bad pattern {self.pattern!r}: {exc}") from None
        if (self.min is not None or self.max is not None) and self.type not in (
            "integer",
            "number",
        ):
            raise ValueError("min/max apply to integer and number parameters only")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is greater than max {self.max}")
        return self

    @property
    def is_required(self) -> bool:
        return self.required if self.required is not None else self.default is None


class HttpRequestSpec(BaseModel):
    model_config = _STRICT

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None  # JSON, templated in string values
    select: str | None = None  # dotted path into a JSON answer, e.g. "data.items.0.status"


class ToolSpecBase(BaseModel):
    model_config = _STRICT

    name: str
    description: str
    category: Literal["read_only", "mutating", "destructive"] = "read_only"
    parallel: bool = False
    timeout: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    output_bound: int = Field(DEFAULT_OUTPUT_BOUND, gt=0)
    params: dict[str, ParamSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> ToolSpecBase:
        if not NAME_PATTERN.match(self.name):
            raise ValueError(f"name {self.name!r} must match {NAME_PATTERN.pattern}")
        for param in self.params:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}", param):
                raise ValueError(f"parameter name {param!r} must be an identifier")
            if param in RESERVED:
                raise ValueError(f"parameter name {param!r} is reserved")
        return self


class CommandToolSpec(ToolSpecBase):
    kind: Literal["command"] = "command"
    run: list[str] = Field(min_length=1)
    # A destructive tool's dry run: this argv instead of ``run`` (e.g. the same command
    # with ``--dry-run=server``); without it, ``run`` with OPSLOOP_DRY_RUN=1 set.
    dry_run: list[str] | None = Field(None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None

    @model_validator(mode="after")
    def _templates(self) -> CommandToolSpec:
        allowed = set(self.params) | RESERVED
        if self.dry_run is not None and self.category != "destructive":
            raise ValueError("dry_run: only a destructive tool has a dry run")
        for where, argv in (("run", self.run), ("dry_run", self.dry_run or [])):
            for element in argv:
                check_template(element, allowed, where=where)
        programs = [self.run[0], *(self.dry_run or [])[:1]]
        for name in (n for program in programs for n in template_fields(program)):
            spec = self.params.get(name)
            if spec is None or not spec.enum:
                # Otherwise the model would choose which program runs.
                raise ValueError(
                    f"run: the program (run[0]) may only use a parameter with an enum, "
                    f"not {{{name}}}"
                )
        check_env(self.env)
        return self


class HttpToolSpec(ToolSpecBase):
    kind: Literal["http"]
    request: HttpRequestSpec

    @model_validator(mode="after")
    def _templates(self) -> HttpToolSpec:
        allowed = set(self.params) | RESERVED
        check_template(self.request.url, allowed, where="request.url")
        for name, value in self.request.headers.items():
            check_template(value, allowed, where=f"request.headers.{name}")
        for text in _strings(self.request.body):
            check_template(text, allowed, where="request.body")
        return self


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("kind", "command")
        return kind if kind in ("command", "http") else "command"
    return str(getattr(value, "kind", "command"))


ToolFileEntry = Annotated[
    Annotated[CommandToolSpec, Tag("command")] | Annotated[HttpToolSpec, Tag("http")],
    Discriminator(_kind),
]


MCP_SERVER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,19}$")
DEFAULT_MCP_TIMEOUT_S = 30.0


class McpToolOverride(BaseModel):
    """The operator's word on one MCP tool; wins over the server's annotations."""

    model_config = _STRICT

    category: Literal["read_only", "mutating", "destructive"] | None = None
    parallel: bool | None = None
    description: str | None = None
    timeout: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)


class McpServerSpec(BaseModel):
    """One ``mcp_servers`` entry: a stdio ``command`` or a streamable HTTP ``url``."""

    model_config = _STRICT

    name: str
    command: list[str] | None = Field(None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(DEFAULT_MCP_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    include: list[str] | None = None
    exclude: list[str] | None = None
    trust_annotations: bool = False
    tools: dict[str, McpToolOverride] = Field(default_factory=dict)
    _where: str = PrivateAttr("")  # "file:line" of the entry, set by ``load_tools_file``

    @property
    def where(self) -> str:
        """``file:line`` of the entry, for errors that come after parsing."""
        return self._where or "tools.yml"

    @model_validator(mode="after")
    def _check(self) -> McpServerSpec:
        if not MCP_SERVER_NAME.match(self.name):
            raise ValueError(f"name {self.name!r} must match {MCP_SERVER_NAME.pattern}")
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        if self.command is not None:
            if self.headers:
                raise ValueError("headers: only for a url server")
            if any("\x00" in part for part in self.command):
                raise ValueError("command: contains a NUL character")
            check_env(self.env)
        else:
            if self.env or self.cwd is not None:
                raise ValueError("env and cwd: only for a command server")
            if not re.match(r"^https?://[^/\s]+", self.url or ""):
                raise ValueError(f"url: {self.url!r} is not an http(s) URL")
            for key, value in self.headers.items():
                try:
                    parse_env_value(value)
                except ValueError as exc:
                    raise ValueError(f"headers.{key}: {exc}") from None
        if self.include is not None and self.exclude is not None:
            raise ValueError("give include or exclude, not both")
        for name, override in self.tools.items():
            if override.parallel and override.category not in (None, "read_only"):
                raise ValueError(f"tools.{name}: parallel applies to read_only tools only")
        return self


class ToolsFile(BaseModel):
    model_config = _STRICT

    tools: list[ToolFileEntry] = Field(default_factory=list)
    toolsets: dict[str, list[str]] = Field(default_factory=dict)
    channels: dict[str, list[str]] = Field(default_factory=dict)
    mcp_servers: list[McpServerSpec] = Field(default_factory=list)


def template_fields(text: str) -> list[str]:
    """The ``{name}`` placeholders of a template (``{{``/``}}`` are literal braces)."""
    return [field for _, field, _, _ in string.Formatter().parse(text) if field is not None]


def check_template(text: str, allowed: set[str], *, where: str) -> None:
    try:
        fields = template_fields(text)
    except ValueError as exc:
        raise ValueError(f"{where}: bad template {text!r}: {exc}") from None
    for name in fields:
        if name == "" or not name.isidentifier():
            raise ValueError(f"{where}: placeholder {{{name}}} must name a parameter")
        if name not in allowed:
            raise ValueError(f"{where}: template names missing parameter {{{name}}}")


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# -- loading with line numbers ----------------------------------------------------


def _line_of(node: yaml.Node | None, loc: Iterable[int | str]) -> int | None:
    """The 1-based line of the deepest node along ``loc`` in a composed YAML tree."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    found = value
                    line = key.start_mark.line + 1
                    break
            if found is None:
                break
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _tool_name(data: Any, index: int, group: str = "tools") -> str | None:
    try:
        name = data[group][index]["name"]
    except (KeyError, IndexError, TypeError):
        return None
    return str(name)


def load_tools_file(path: str | Path) -> ToolsFile:
    """Parse and validate a tools.yml; ``ConfigError("file:line: tool 'x': …")``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"OPSLOOP_TOOLS: cannot read {path}: {exc.strerror}") from None
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: the file must be a mapping with a 'tools' list")
    try:
        parsed = ToolsFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(path, root, data, exc)) from None
    _check_names(path, root, parsed)
    return parsed


def _describe(path: Path, root: yaml.Node | None, data: Any, exc: ValidationError) -> str:
    error = exc.errors()[0]
    loc = list(error["loc"])
    if len(loc) > 2 and loc[0] == "tools" and loc[2] in ("command", "http"):
        del loc[2]  # the union branch, not a key of the file
    clean: list[int | str] = loc
    message = str(error["msg"]).removeprefix("Value error, ")
    head, colon, _ = message.partition(": ")
    if colon and re.fullmatch(r"[a-z_]+(\.[A-Za-z0-9_-]+)*", head):
        # A check of the whole tool that names its field ("run: …"): point at it.
        clean = [*clean, *head.split(".")]
        message = message[len(head) + 2 :]
    line = _line_of(root, clean)
    tool = ""
    if len(clean) >= 2 and clean[0] == "tools" and isinstance(clean[1], int):
        name = _tool_name(data, clean[1])
        tool = f" tool {name!r}:" if name else f" tool #{clean[1] + 1}:"
    elif len(clean) >= 2 and clean[0] == "mcp_servers" and isinstance(clean[1], int):
        name = _tool_name(data, clean[1], "mcp_servers")
        tool = f" mcp server {name!r}:" if name else f" mcp server #{clean[1] + 1}:"
    field = ".".join(str(p) for p in clean[2:]) if tool else ".".join(str(p) for p in clean)
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    where = f"{path}:{line}" if line else str(path)
    return f"{where}:{tool} {field + ': ' if field else ''}{message}".replace(":  ", ": ")


def _check_names(path: Path, root: yaml.Node | None, parsed: ToolsFile) -> None:
    seen: dict[str, int] = {}
    for index, tool in enumerate(parsed.tools):
        if tool.name in seen:
            line = _line_of(root, ["tools", index, "name"])
            raise ConfigError(
                f"{path}:{line}: tool {tool.name!r}: duplicate name "
                f"(first defined as tool #{seen[tool.name] + 1})"
            )
        seen[tool.name] = index
    servers: dict[str, int] = {}
    for index, server in enumerate(parsed.mcp_servers):
        line = _line_of(root, ["mcp_servers", index, "name"])
        if server.name in servers:
            raise ConfigError(
                f"{path}:{line}: mcp server {server.name!r}: duplicate name "
                f"(first defined as mcp server #{servers[server.name] + 1})"
            )
        servers[server.name] = index
        server._where = f"{path}:{line}"
    for group in ("toolsets", "channels"):
        entries: dict[str, list[str]] = getattr(parsed, group)
        for key, names in entries.items():
            for n, name in enumerate(names):
                if not NAME_PATTERN.match(name):
                    line = _line_of(root, [group, key, n])
                    raise ConfigError(f"{path}:{line}: {group}.{key}: bad name {name!r}")
