"""The chunks of Slack's structured chat streaming, as the fake Slack checks and holds them.

``chat.startStream`` / ``appendStream`` / ``stopStream`` take either ``markdown_text`` or
``chunks`` (never both: ``cannot_provide_both_markdown_text_and_chunks``); a stream keeps the
mode it was started with (``streaming_mode_mismatch`` otherwise); an append needs one of
them (``markdown_text_or_chunks_required``). Chunks are ``markdown_text`` (``text``),
``task_update`` (``id``, ``title``, ``status`` one of ``pending``/``in_progress``/
``complete``/``error``, optional ``details``/``output`` up to 256 characters and ``sources``),
``plan_update`` (``title``) and ``blocks`` (``blocks``, Block Kit rules); anything else is
``invalid_chunks`` with Slack-style reasons in ``errors``. ``task_display_mode`` is
``timeline`` (default), ``plan`` or ``dense``, else ``invalid_arguments``.

What a chunk stream shows is held on the message as ``stream`` in its wire shape (the dev
page renders it): ``task_display_mode``, ``title`` (the plan's) and ``items`` in order —
``{"type": "text", "text"}`` and ``{"type": "task", "id", "title", "status", "details",
"output"}``; a task update with a known id changes that task in place. Bounded:
:data:`MAX_TASKS` tasks per message.
"""

from __future__ import annotations

from typing import Any

from bot.emulator.slack_wire import Message, Params, SlackError, block_errors

TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
DISPLAY_MODES = frozenset({"timeline", "plan", "dense"})
MAX_TASK_FIELD = 256
MAX_TASKS = 200
_MARKDOWN, _CHUNKS = "markdown", "chunks"

Key = tuple[str, str]


def _text_field(chunk: dict[str, Any], name: str, where: str, errors: list[str]) -> None:
    value = chunk.get(name)
    if not isinstance(value, str) or not value:
        errors.append(f"missing required field: {name} [json-pointer:{where}/{name}]")
    elif name != "text" and len(value) > MAX_TASK_FIELD:
        errors.append(
            f"must be less than {MAX_TASK_FIELD + 1} characters [json-pointer:{where}/{name}]"
        )


def chunk_errors(chunks: object) -> list[str]:
    """Slack-style reasons why ``chunks`` would be refused as ``invalid_chunks``."""
    if not isinstance(chunks, list) or not chunks:
        return ["must be a non-empty array [json-pointer:/chunks]"]
    errors: list[str] = []
    for i, chunk in enumerate(chunks):
        where = f"/chunks/{i}"
        if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
            errors.append(f"missing required field: type [json-pointer:{where}]")
            continue
        match chunk["type"]:
            case "markdown_text":
                if not isinstance(chunk.get("text"), str):
                    errors.append(f"missing required field: text [json-pointer:{where}/text]")
            case "task_update":
                _text_field(chunk, "id", where, errors)
                _text_field(chunk, "title", where, errors)
                if chunk.get("status") not in TASK_STATUSES:
                    errors.append(f"invalid status [json-pointer:{where}/status]")
                for name in ("details", "output"):
                    if name in chunk and chunk[name] is not None:
                        _text_field(chunk, name, where, errors)
                sources = chunk.get("sources")
                if sources is not None and not (
                    isinstance(sources, list)
                    and all(isinstance(s, dict) and isinstance(s.get("url"), str) for s in sources)
                ):
                    errors.append(f"invalid sources [json-pointer:{where}/sources]")
            case "plan_update":
                _text_field(chunk, "title", where, errors)
            case "blocks":
                errors += [f"{e} (in {where})" for e in block_errors(chunk.get("blocks"))]
            case other:
                errors.append(f"unsupported chunk type {other!r} [json-pointer:{where}/type]")
    return errors


class StreamChunks:
    """Per streaming message: the mode it started in; checks each call like Slack."""

    def __init__(self) -> None:
        self._modes: dict[Key, str | None] = {}

    def check(self, params: Params, *, method: str) -> str | None:
        """Refuse a malformed call; the call's mode (``markdown``, ``chunks`` or None)."""
        has_text = bool(params.get("markdown_text"))
        has_chunks = params.get("chunks") not in (None, "")
        if has_text and has_chunks:
            raise SlackError("cannot_provide_both_markdown_text_and_chunks")
        if method == "chat.startStream":
            mode = params.get("task_display_mode")
            if mode not in (None, "") and mode not in DISPLAY_MODES:
                raise SlackError("invalid_arguments", needed="task_display_mode")
        if method == "chat.appendStream" and not has_text and not has_chunks:
            raise SlackError("markdown_text_or_chunks_required")
        if has_chunks:
            errors = chunk_errors(params.get("chunks"))
            if errors:
                raise SlackError("invalid_chunks", errors=errors)
            return _CHUNKS
        return _MARKDOWN if has_text else None

    def started(self, message: Message, params: Params, mode: str | None) -> None:
        """A stream began (after :meth:`check`): remember its mode, show its chunks."""
        self._modes[(message.channel, message.ts)] = mode
        if mode == _CHUNKS:
            display = str(params.get("task_display_mode") or "timeline")
            message.extra["stream"] = {"task_display_mode": display, "title": None, "items": []}
            self._show(message, params["chunks"])

    def go_on(self, message: Message, params: Params, *, method: str) -> None:
        """An append or the stop: refused unless in the stream's mode; chunks shown."""
        mode = self.check(params, method=method)
        key = (message.channel, message.ts)
        started = self._modes.get(key)
        if mode is not None and started is not None and mode != started:
            raise SlackError("streaming_mode_mismatch")
        if started is None and mode is not None:
            self._modes[key] = started = mode
            if mode == _CHUNKS:
                message.extra["stream"] = {
                    "task_display_mode": "timeline",
                    "title": None,
                    "items": [],
                }
        if mode == _CHUNKS:
            self._show(message, params["chunks"])
        if method == "chat.stopStream":
            self._modes.pop(key, None)

    def _show(self, message: Message, chunks: list[dict[str, Any]]) -> None:
        view = message.extra["stream"]
        items: list[dict[str, Any]] = view["items"]
        tasks = {i["id"]: i for i in items if i["type"] == "task"}
        for chunk in chunks:
            match chunk["type"]:
                case "markdown_text":
                    if items and items[-1]["type"] == "text":
                        items[-1]["text"] += chunk["text"]
                    elif chunk["text"]:
                        items.append({"type": "text", "text": chunk["text"]})
                case "task_update":
                    task = tasks.get(chunk["id"])
                    if task is None:
                        if len(tasks) >= MAX_TASKS:
                            continue
                        task = tasks[chunk["id"]] = {"type": "task", "id": chunk["id"]}
                        items.append(task)
                    task.update(
                        title=chunk["title"],
                        status=chunk["status"],
                        details=chunk.get("details"),
                        output=chunk.get("output"),
                    )
                case "plan_update":
                    view["title"] = chunk["title"]
                case "blocks":
                    items.append({"type": "blocks", "blocks": chunk["blocks"]})


def tasks_of(message: Message) -> list[dict[str, Any]]:
    """The task cards a streamed message shows, in order (tests read these)."""
    view = message.extra.get("stream") or {}
    return [dict(i) for i in view.get("items", []) if i["type"] == "task"]
