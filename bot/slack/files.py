"""Long output as a file in the thread: Slack's v2 upload, and the summary message it goes with.

An answer too long for a few messages (more than :data:`ANSWER_FILE_AFTER` of them, the split
of ``bot.slack.answers``) is posted as ``answer.md``: the thread gets one message holding a
readable summary — the answer's opening, cut at a paragraph, and a line naming the file —
and the whole answer as a file. Shorter answers are split into messages as before.

The upload is Slack's v2 flow, which slack-sdk's ``files_upload_v2`` makes:
``files.getUploadURLExternal`` (name and length) → POST of the bytes to the returned URL →
``files.completeUploadExternal`` (``channel_id``, ``thread_ts``, ``initial_comment``);
``files.upload`` is retired. It needs the ``files:write`` scope. The bytes do not pass
through ``ScrubbingWebClient.api_call``, so they are scrubbed here, as are the title and
comment (sent as query params). A failed upload is logged and reported as None: the
caller then posts the text as before.
"""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.blockkit import MAX_MARKDOWN

log = logging.getLogger(__name__)

ANSWER_FILE_AFTER = 3  # an answer of more messages than this is posted as a file
ANSWER_FILENAME = "answer.md"
SUMMARY_CHARS = 2_500  # the opening of a long answer shown in its message
MAX_FILE_BYTES = 5 * 1024 * 1024  # an artifact's cap: nothing larger is ever uploaded


def _scrub(client: AsyncWebClient, text: str) -> str:
    scrubber = getattr(client, "scrubber", None)
    return scrubber(text) if scrubber is not None else text


def summary(answer: str, *, filename: str = ANSWER_FILENAME, limit: int = SUMMARY_CHARS) -> str:
    """The opening of a long answer (cut at a paragraph, else a line, else a space) and a
    line saying where the rest is; Markdown, within one ``markdown`` block."""
    head = answer[:limit]
    for sep in ("\n\n", "\n", " "):
        at = head.rfind(sep)
        if at >= limit // 2:
            head = head[:at]
            break
    if head.count("```") % 2:  # a code block cut open: close it
        head += "\n```"
    note = (
        f"\n\n…\n\n_The whole answer ({len(answer):,} characters) is in the attached file "
        f"`{filename}`._"
    )
    return (head.rstrip() + note)[:MAX_MARKDOWN]


async def post_file(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str,
    filename: str,
    content: str,
    title: str,
    comment: str | None = None,
) -> str | None:
    """Upload ``content`` as ``filename`` into the thread; the file's id, or None if Slack
    (or the upload URL) refused it."""
    data = _scrub(client, content).encode("utf-8", errors="replace")[:MAX_FILE_BYTES]
    try:
        response = await client.files_upload_v2(
            channel=channel,
            thread_ts=thread_ts,
            filename=filename,
            content=data,
            title=_scrub(client, title),
            initial_comment=_scrub(client, comment) if comment else None,
        )
    except Exception as exc:
        log.warning("could not upload %s to %s: %s", filename, channel, exc)
        return None
    file = response.get("file") or {}
    return str(file.get("id") or "") or None
