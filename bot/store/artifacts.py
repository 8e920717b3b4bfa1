"""Full tool outputs behind the bounded observations, kept for ``ARTIFACT_TTL_S``.

The agent core cuts a long tool output for the model and stores the whole of it here
(``ArtifactStore``); the note the model sees quotes the reference. A reference reads
``artifact:<job_id>:<call_id>:<suffix>``: it holds the job id, so it leads back to its key
(under the job's thread hash tag) with no index, and the random suffix, claimed with
``SET NX``, keeps two outputs of the same call (a retry, a resumed job) apart.

An artifact is read back (``get``, by the ``read_artifact`` tool) only by the job that
stored it: the job id asked with is compared with the one the reference holds before any
key is read, so a job cannot reach another job's outputs — not even its thread's.

An artifact is capped at ``MAX_ARTIFACT_BYTES`` of UTF-8: beyond that the head is kept
with a note of the full size.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from bot.errors import StoreError
from bot.store.connection import translated
from bot.store.keys import ARTIFACT_TTL_S
from bot.store.redis_store import RedisStore

REF_PREFIX = "artifact:"
MAX_ARTIFACT_BYTES = 5 * 1024 * 1024
_CLAIM_ATTEMPTS = 5


def random_suffix() -> str:
    """Eight hex digits: short enough to quote, rarely taken (``put`` retries if so)."""
    return secrets.token_hex(4)


def make_ref(job_id: str, call_id: str, suffix: str) -> str:
    """``artifact:<job_id>:<call_id>:<suffix>``."""
    return f"{REF_PREFIX}{job_id}:{call_id}:{suffix}"


def parse_ref(ref: str) -> tuple[str, str] | None:
    """``(job_id, ref body)`` of a reference, or None if it is not one of ours.

    A job id is ``channel:thread_ts:jN``, so its three parts come first; the suffix is
    last and the call id, whatever it contains, is what lies between.
    """
    if not ref.startswith(REF_PREFIX):
        return None
    body = ref[len(REF_PREFIX) :]
    parts = body.split(":", 3)
    if len(parts) != 4 or not all(parts[:3]):
        return None
    call_id, sep, suffix = parts[3].rpartition(":")
    if not sep or not call_id or not suffix:
        return None
    return ":".join(parts[:3]), body


def capped(text: str, max_bytes: int = MAX_ARTIFACT_BYTES) -> bytes:
    """``text`` as UTF-8 within ``max_bytes``; a cut one ends with a note of its size.

    Characters UTF-8 cannot encode (lone surrogates) become ``?`` rather than failing.
    """
    data = text.encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return data
    note = (
        f"\n[artifact cut: {len(text)} chars ({len(data)} bytes) in all;"
        f" the head, up to {max_bytes} bytes with this note, is kept]"
    ).encode()
    head = data[: max(max_bytes - len(note), 0)]
    # The cut may split a character: drop its partial bytes.
    head = head.decode("utf-8", errors="ignore").encode()
    return head + note


@dataclass(eq=False, kw_only=True)
class RedisArtifacts(RedisStore):
    """``ArtifactStore`` in Redis; ``get`` reads a job's artifact back by its reference."""

    ttl_s: int = ARTIFACT_TTL_S
    max_bytes: int = MAX_ARTIFACT_BYTES
    suffix: Callable[[], str] = random_suffix

    async def put(self, job_id: str, call_id: str, text: str) -> str:
        """Store ``text`` (capped) for ``ARTIFACT_TTL_S``; a new reference each time."""
        data = capped(text, self.max_bytes)
        async with translated("artifact put"):
            for _ in range(_CLAIM_ATTEMPTS):
                ref = make_ref(job_id, call_id, self.suffix())
                key = self.keys.artifact(job_id, ref[len(REF_PREFIX) :])
                if await self.redis.set(key, data, nx=True, ex=self.ttl_s):
                    return ref
        raise StoreError(f"no free artifact reference for {job_id}:{call_id}")

    async def get(self, job_id: str, ref: str) -> str | None:
        """The artifact's text; None if it expired, ``ref`` is not a reference, or it is
        another job's (decided from the reference, without a round trip)."""
        parsed = parse_ref(ref.strip())
        if parsed is None or parsed[0] != job_id:
            return None
        async with translated("artifact get"):
            value: str | bytes | None = await self.redis.get(self.keys.artifact(*parsed))
        return value.decode() if isinstance(value, bytes) else value
