"""A streamed response stuck repeating itself is cut and counts as an empty response.

``RepetitionDetector`` looks at the last 256 bytes of the stream (UTF-8) for a pattern of
1 to 20 bytes that covers the whole window. In a run with ``stream=True`` a hit cancels
the stream; the response is treated as empty, so it is retried (at most twice) and a
third degenerate response ends the run ``no_action``. Ordinary long text streams through.
"""

from __future__ import annotations

import itertools
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agent import InMemoryHistory, StopReason, run
from bot.agent.events import StreamDelta
from bot.agent.stream_repetition import MAX_PERIOD, WINDOW_BYTES, RepetitionDetector
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import Recorder, echo_tool, make_config

# Deterministic examples, no per-example time limit: the suite never depends on speed.
PROPERTY = settings(derandomize=True, deadline=None, database=None)

ALPHABET = string.ascii_letters + string.digits

REPORT = "\n".join(
    f"{i:02d}:{(7 * i) % 60:02d} web-{i % 4:02d} cpu={(37 * i) % 100}% "
    f"load={(i * 13) % 17}.{(i * 7) % 10} nginx: {['ok', 'slow', 'restarting', 'ok?'][i % 4]}"
    for i in range(60)
)
PROSE = (
    "The CPU spike on web-03 began at 10:02 UTC, right after the deploy of build 4812. "
    "The top processes show php-fpm workers pinned at 100% each; the slow log points at "
    "the /search endpoint, which now runs an unindexed query against the orders table. "
    "Rolling back the deploy or adding the index on orders(customer_id, created_at) "
    "should bring the load down; the other two web hosts stay below 40%, so traffic can "
    "be drained from web-03 while the fix is prepared. Nothing in the kernel log or the "
    "disk metrics suggests hardware trouble; memory is steady at 61% and swap is unused."
)
RUSSIAN = (
    "Нагрузка на процессор web-03 выросла в 10:02 после выкладки сборки 4812. Воркеры "
    "php-fpm загружены полностью, медленный журнал указывает на запрос поиска без индекса "
    "по таблице заказов. Откат выкладки или новый индекс должны снизить нагрузку; остальные "
    "два сервера работают ниже сорока процентов, так что трафик можно увести с web-03."
)


def feed_all(detector: RepetitionDetector, chunks: list[str]) -> bool:
    return any([detector.feed(c) for c in chunks])


def distinct_pattern(period: int) -> str:
    """An ASCII pattern whose repetition has exactly this period in bytes."""
    return ALPHABET[:period]


# -- RepetitionDetector on its own -----------------------------------------------


def test_window_and_periods_are_the_documented_ones() -> None:
    assert WINDOW_BYTES == 256
    assert MAX_PERIOD == 20


def test_every_period_from_1_to_20_is_caught() -> None:
    for period in range(1, 21):
        pattern = distinct_pattern(period)
        repeated = pattern * (WINDOW_BYTES // period + 2)
        assert RepetitionDetector().feed(repeated), period


def test_period_21_is_not_caught() -> None:
    repeated = distinct_pattern(21) * 40
    detector = RepetitionDetector()
    assert not detector.feed(repeated)
    assert not feed_all(detector, [distinct_pattern(21)] * 40)


def test_nothing_is_caught_before_the_window_is_full() -> None:
    detector = RepetitionDetector()
    assert not detector.feed("a" * (WINDOW_BYTES - 1))
    assert detector.feed("a")


def test_window_counts_bytes_not_characters() -> None:
    # 128 two-byte characters fill the 256-byte window.
    detector = RepetitionDetector()
    assert not detector.feed("я" * 127)
    assert detector.feed("я")


def test_multibyte_patterns_are_measured_in_bytes() -> None:
    cyrillic = "абвгдежзийклмнопрст"
    emoji = "🔥🚒🧯🛑🚨🩺"
    cases = {
        "日本語": True,  # 9 bytes
        cyrillic[:10]: True,  # 20 bytes
        cyrillic[:11]: False,  # 22 bytes
        emoji[:5]: True,  # 20 bytes
        emoji[:6]: False,  # 24 bytes
    }
    for pattern, caught in cases.items():
        size = len(pattern.encode())
        repeated = pattern * (2 * WINDOW_BYTES // size + 2)
        assert RepetitionDetector().feed(repeated) is caught, pattern


def test_repetition_must_cover_the_whole_window() -> None:
    detector = RepetitionDetector()
    assert not detector.feed(PROSE)
    assert not feed_all(detector, ["ab"] * 127)  # 254 bytes: the window still holds prose
    assert detector.feed("ab")


def test_verdict_does_not_depend_on_how_the_stream_is_split() -> None:
    # The window slides over the stream, not over delta boundaries: 600 bytes of
    # "ok ok ..." followed by a short tail are caught whether they come as many small
    # deltas or as one large one (some servers send big deltas).
    stream = "ok " * 200 + "and then the answer went on."
    small = RepetitionDetector()
    assert feed_all(small, [stream[i : i + 8] for i in range(0, len(stream), 8)])
    assert RepetitionDetector().feed(stream)


def test_ordinary_text_is_not_caught() -> None:
    for sample in (REPORT, PROSE, RUSSIAN, PROSE + "\n\n" + RUSSIAN + "\n\n" + REPORT):
        assert not RepetitionDetector().feed(sample)


@PROPERTY
@given(st.integers(min_value=1, max_value=64))
def test_ordinary_text_is_not_caught_in_any_chunking(size: int) -> None:
    sample = PROSE + "\n" + REPORT + "\n" + RUSSIAN
    chunks = [sample[i : i + size] for i in range(0, len(sample), size)]
    assert not feed_all(RepetitionDetector(), chunks)


@st.composite
def chunked(draw: st.DrawFn, body: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=len(body) - 1), max_size=40)))
    bounds = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


@PROPERTY
@given(
    st.text(min_size=1, max_size=20)
    .filter(lambda p: len(p.encode("utf-8")) <= MAX_PERIOD)
    .flatmap(
        lambda p: chunked(p * (2 * WINDOW_BYTES // len(p.encode("utf-8")) + 1)),
    ),
    st.text(max_size=30),
)
def test_any_short_pattern_is_caught_in_any_chunking(chunks: list[str], prefix: str) -> None:
    assert feed_all(RepetitionDetector(), [prefix, *chunks])


@PROPERTY
@given(
    st.lists(st.sampled_from(ALPHABET), min_size=21, max_size=40, unique=True).flatmap(
        lambda chars: chunked("".join(chars) * 20)
    )
)
def test_longer_patterns_are_never_caught(chunks: list[str]) -> None:
    assert not feed_all(RepetitionDetector(), chunks)


# -- in a streamed run -------------------------------------------------------------


DEGENERATE = "ok " * 400


def deltas_per_request(recorder: Recorder) -> list[str]:
    """The streamed text of each model request, in order."""
    out: list[str] = []
    for event in recorder.events:
        if event.kind == "model_request_start":
            out.append("")
        elif isinstance(event, StreamDelta):
            out[-1] += event.text
    return out


async def test_degenerate_stream_is_cut_and_retried(recorder: Recorder) -> None:
    memory = InMemoryHistory()
    model = ScriptedModel([text(DEGENERATE), text("web-03 is fine")])
    config = make_config(model, memory=memory, stream=True, on_event=recorder)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "web-03 is fine"
    assert len(model.requests) == 2
    assert result.iterations == 1
    streamed = deltas_per_request(recorder)
    assert len(streamed) == 2
    # The first stream stopped soon after the window filled, not at its end.
    assert WINDOW_BYTES <= len(streamed[0]) <= WINDOW_BYTES + 8
    assert streamed[1] == "web-03 is fine"
    assert not any("ok ok ok" in (getattr(m, "content", None) or "") for m in memory.messages)


async def test_two_degenerate_streams_then_a_good_one_complete() -> None:
    model = ScriptedModel([text(DEGENERATE), text("=" * 600), text("CPU is back to 20%")])

    result = await run(make_config(model, stream=True))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "CPU is back to 20%"
    assert len(model.requests) == 3
    model.assert_done()


async def test_three_degenerate_streams_end_no_action() -> None:
    model = ScriptedModel([text(DEGENERATE)] * 3 + [text("never")])

    result = await run(make_config(model, stream=True))

    assert result.stop_reason is StopReason.NO_ACTION
    assert len(model.requests) == 3
    assert result.output is None


async def test_long_varied_answer_streams_through(recorder: Recorder) -> None:
    answer = PROSE + "\n\n" + REPORT + "\n\n" + RUSSIAN
    model = ScriptedModel([text(answer)])

    result = await run(make_config(model, stream=True, on_event=recorder))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == answer
    assert len(model.requests) == 1
    assert deltas_per_request(recorder) == [answer]


async def test_each_response_is_checked_on_its_own() -> None:
    # 200 "=" end the first answer and 100 start the second: together they would fill
    # the window, but a response's stream is judged alone.
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), content=PROSE + "=" * 200),
            text("=" * 100 + PROSE),
        ]
    )

    result = await run(make_config(model, tools=[echo_tool()], stream=True))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(model.requests) == 2
    assert result.output == "=" * 100 + PROSE
