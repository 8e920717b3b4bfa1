"""Slack's v2 file upload on the fake Slack: an upload URL, the bytes, the share.

``files.getUploadURLExternal`` (``filename`` and ``length`` required: a zero or missing
length is ``missing_argument``, a non-number ``invalid_arguments``) hands out an upload URL
on the fake's own server and a file id; a POST of the bytes to that URL (raw, or a form's
``file`` field) answers ``200 OK - <size>`` as Slack's upload host does, 404 for an unknown
ticket; ``files.completeUploadExternal`` takes ``files`` (a JSON array of ``{"id",
"title"}``), shares them in ``channel_id`` (in the thread of ``thread_ts``) as a message of
the bot with ``initial_comment`` as its text and the files in ``files``, or keeps them
private without a channel. A file never uploaded, unknown or already completed is
``file_not_found``; a malformed ``files`` is ``invalid_arguments``; more than
:data:`MAX_FILES` per call ``invalid_arguments`` too.

Each file is served back at its ``url_private`` (``Authorization: Bearer xoxb-…`` needed,
like Slack's) and at its ``permalink`` (no token: the dev page's download link). A text or
Markdown file's object carries its opening as ``preview``, with ``preview_is_truncated``,
``lines`` and ``lines_more``, as Slack's file objects of text files do (Slack's preview is
a few lines; this one holds up to :data:`PREVIEW_CHARS`, so the dev page can render a
whole ``.md`` file, an incident timeline or a long answer, in the thread). Bounded:
:data:`MAX_FILE_BYTES` per file, :data:`MAX_HELD_FILES` files held (oldest dropped).
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.emulator.slack_wire import (
    BOT_USER_ID,
    Message,
    Params,
    Reply,
    SlackError,
    bearer_token,
)

MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_HELD_FILES = 200
MAX_FILES = 10
PREVIEW_CHARS = 20_000  # of a text file, in its object (the dev page renders it)
UPLOAD_PATH = "/upload/v1/{ticket}"
FILE_PATH = "/files-pri/{file_id}/{name}"
PERMALINK_PATH = "/files/{file_id}/{name}"


@dataclass
class HeldFile:
    id: str
    ticket: str
    name: str
    length: int
    data: bytes | None = None
    title: str | None = None
    completed: bool = False

    def as_slack(self, base: str) -> dict[str, Any]:
        size = len(self.data or b"")
        markdown = self.name.endswith(".md")
        return {
            "id": self.id,
            "name": self.name,
            "title": self.title or self.name,
            "mimetype": "text/markdown" if markdown else "text/plain",
            "filetype": "markdown" if markdown else "text",
            "size": size,
            "user": BOT_USER_ID,
            "url_private": f"{base}/files-pri/{self.id}/{self.name}",
            "url_private_download": f"{base}/files-pri/{self.id}/{self.name}",
            "permalink": f"{base}/files/{self.id}/{self.name}",
            **self._preview(),
        }

    def _preview(self) -> dict[str, Any]:
        """Slack's preview fields of a text file: its opening and how much is left out."""
        text = (self.data or b"").decode("utf-8", errors="replace")
        preview = text[:PREVIEW_CHARS]
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        shown = preview.count("\n") + (0 if preview.endswith("\n") or not preview else 1)
        return {
            "preview": preview,
            "preview_is_truncated": len(preview) < len(text),
            "lines": lines,
            "lines_more": max(0, lines - shown),
        }


class FakeFiles:
    """The three steps of Slack's file upload, installed on a ``FakeSlack``."""

    def __init__(self, slack: Any) -> None:  # a FakeSlack (which imports this module)
        self._slack = slack
        self._files: OrderedDict[str, HeldFile] = OrderedDict()
        self._tickets: dict[str, str] = {}
        slack.add_method("files.getUploadURLExternal", self._get_upload_url)
        slack.add_method("files.completeUploadExternal", self._complete)
        slack.add_route("POST", UPLOAD_PATH, self._upload)
        slack.add_route("GET", FILE_PATH, self._download)
        slack.add_route("GET", PERMALINK_PATH, self._permalink)

    @property
    def _base(self) -> str:
        return str(self._slack.api_url).removesuffix("/api/")

    def file(self, file_id: str) -> HeldFile:
        """A file held (KeyError if not)."""
        return self._files[file_id]

    def shared(self, body: Reply) -> list[Message]:
        """The messages a ``files.completeUploadExternal`` answer shared its files in."""
        ids = {f.get("id") for f in body.get("files") or [] if isinstance(f, dict)}
        return [
            m
            for m in self._slack.chat.state.messages.values()
            if any(f.get("id") in ids for f in m.extra.get("files") or [])
        ]

    # ---- methods -------------------------------------------------------------------------

    def _get_upload_url(self, params: Params) -> Reply:
        name = str(params.get("filename") or "")
        if not name:
            raise SlackError("invalid_arguments", needed="filename")
        try:
            length = int(str(params.get("length") or 0))
        except ValueError:
            raise SlackError("invalid_arguments", needed="length") from None
        if length <= 0:
            raise SlackError("missing_argument")
        if length > MAX_FILE_BYTES:
            raise SlackError("file_upload_size_restricted")
        file_id, ticket = f"F{secrets.token_hex(5).upper()}", secrets.token_urlsafe(12)
        self._files[file_id] = HeldFile(file_id, ticket, name.replace("/", "_"), length)
        self._tickets[ticket] = file_id
        while len(self._files) > MAX_HELD_FILES:
            old = self._files.popitem(last=False)[1]
            self._tickets.pop(old.ticket, None)
        return {"upload_url": f"{self._base}/upload/v1/{ticket}", "file_id": file_id}

    def _complete(self, params: Params) -> Reply:
        files = params.get("files")
        if isinstance(files, str):
            try:
                files = json.loads(files)
            except ValueError:
                raise SlackError("invalid_arguments", needed="files") from None
        if not isinstance(files, list) or not files or len(files) > MAX_FILES:
            raise SlackError("invalid_arguments", needed="files")
        held: list[HeldFile] = []
        for item in files:
            file = self._files.get(str(item.get("id"))) if isinstance(item, dict) else None
            if file is None or file.data is None or file.completed:
                raise SlackError("file_not_found")
            held.append(file)
        channel = str(params.get("channel_id") or params.get("channels") or "")
        if "," in channel:
            raise SlackError("invalid_channel")
        for file, item in zip(held, files, strict=True):
            file.completed = True
            file.title = str(item.get("title") or file.name)
        if channel:
            self._slack.chat.post_as_bot(
                channel,
                str(params.get("initial_comment") or ""),
                thread_ts=params.get("thread_ts") or None,
                extra={"files": [f.as_slack(self._base) for f in held], "upload": True},
            )
        return {"files": [{"id": f.id, "title": f.title} for f in held]}

    # ---- the upload host -----------------------------------------------------------------

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = self._tickets.get(request.match_info["ticket"])
        file = self._files.get(file_id or "")
        if file is None or file.completed:
            return web.Response(status=404, text="Not Found")
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            field = form.get("file")
            data = field.file.read() if isinstance(field, web.FileField) else b""
        else:
            data = await request.content.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            return web.Response(status=413, text="Request Entity Too Large")
        file.data = data
        return web.Response(text=f"OK - {len(data)}")

    async def _download(self, request: web.Request) -> web.Response:
        token = bearer_token(request.headers.get("Authorization", ""))
        if not token or not token.startswith("xoxb-"):
            return web.Response(status=302, headers={"Location": "/?redir=login"})
        return self._serve(request)

    async def _permalink(self, request: web.Request) -> web.Response:
        return self._serve(request)

    def _serve(self, request: web.Request) -> web.Response:
        file = self._files.get(request.match_info["file_id"])
        if file is None or file.data is None or not file.completed:
            return web.Response(status=404, text="Not Found")
        return web.Response(
            body=file.data,
            content_type="text/plain",
            charset="utf-8",
            headers={"Content-Disposition": f'attachment; filename="{file.name}"'},
        )
