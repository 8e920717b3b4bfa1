"""A cut tool result can be read back: ``read_artifact(ref, start_line?, lines?, contains?)``.

The cut result's last line names ``read_artifact(ref="REF")``; the tool (offered from
the job's first request) returns the lines from ``start_line`` or those containing
``contains`` (case-insensitive), each with its line number, within the output bound, and
never makes an artifact of its own result. A job reads only its own artifacts: an
unknown reference and another job's are the same ``Error: no artifact …``. It goes the
one tool path: validated, traced (events), run in parallel with other reads.
"""

from __future__ import annotations

import logging
import re

import pytest

from bot.agent import CallContext, FunctionTool, InMemoryArtifacts, StopReason, ToolMessage, run
from bot.agent.messages import ModelRequest, ModelResponse
from bot.agent.read_artifact import MAX_LINE_CHARS, ReadArtifact, with_read_artifact
from bot.agent.redact import redact_secrets
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tools import DEFAULT_OUTPUT_BOUND, runs_in_parallel
from bot.errors import ToolError

from .conftest import HostArgs, Recorder, make_config

LOG = "".join(
    f"2024-05-01T10:{n // 60:02d}:{n % 60:02d} "
    + (f"ERROR upstream timed out (req {n})" if n % 97 == 0 else f"INFO GET /healthz 200 ({n})")
    + "\n"
    for n in range(1, 601)
)  # 600 lines, about 28k chars; ERROR on lines 97, 194, 291, 388, 485, 582
ERROR_LINES = [97, 194, 291, 388, 485, 582]
NOTE = re.compile(r'read_artifact\(ref="([^"]+)"\)\]$')


def log_tool(output: str = LOG) -> FunctionTool:
    async def fn(args: HostArgs, ctx: CallContext) -> str:
        return output

    return FunctionTool(name="tail_log", description="Tail a log", args_model=HostArgs, fn=fn)


def last_tool_result(request: ModelRequest) -> ToolMessage:
    return [m for m in request.messages if isinstance(m, ToolMessage)][-1]


def ref_in(request: ModelRequest) -> str:
    """The reference the cut result's last line names, as the model would read it."""
    found = NOTE.search(last_tool_result(request).content.splitlines()[-1])
    assert found is not None, last_tool_result(request).content[-300:]
    return found[1]


def then_read(**arguments: object) -> object:
    """A model step: call ``read_artifact`` on the reference of the last cut result."""

    def step(request: ModelRequest) -> ModelResponse:
        return calls(call("read_artifact", "read1", ref=ref_in(request), **arguments))

    return step


async def read_after_cut(
    artifacts: InMemoryArtifacts | None = None, **arguments: object
) -> tuple[ToolMessage, ScriptedModel, Recorder]:
    """A run: the log is cut, the model reads it back with ``arguments``, then answers."""
    artifacts = artifacts if artifacts is not None else InMemoryArtifacts()
    model = ScriptedModel(
        [calls(call("tail_log", "tail1", host="web-03")), then_read(**arguments), text("done")]
    )
    recorder = Recorder()
    config = make_config(
        model,
        tools=with_read_artifact([log_tool()], artifacts),
        artifacts=artifacts,
        on_event=recorder,
    )
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    model.assert_done()
    return last_tool_result(model.requests[2]), model, recorder


async def test_the_model_finds_the_errors_of_a_cut_log() -> None:
    artifacts = InMemoryArtifacts()

    read, model, recorder = await read_after_cut(artifacts, contains="ERROR")

    cut = last_tool_result(model.requests[1])
    assert len(cut.content) < len(LOG) and "ERROR" not in cut.content
    ref = cut.artifact
    assert ref is not None
    seen = LOG[:DEFAULT_OUTPUT_BOUND].count("\n") + 1  # the last of them in part
    assert cut.content.splitlines()[-1] == (
        f"[output cut: {len(LOG)} chars in all; 600 lines, shown to line {seen};"
        f' read more with read_artifact(ref="{ref}")]'
    )
    assert not read.is_error and read.name == "read_artifact"
    lines = read.content.splitlines()
    assert lines[0] == (
        f'{ref}: 6 lines contain "ERROR" (case-insensitive, searched from line 1 of 600); 6 shown'
    )
    log_lines = LOG.splitlines()
    assert lines[1:] == [f"{n}: {log_lines[n - 1]}" for n in ERROR_LINES]
    # Read through the one tool path: traced, and no new artifact of its own.
    started = [e.tool for e in recorder.of("tool_start")]
    assert started == ["tail_log", "read_artifact"]
    assert read.artifact is None and list(artifacts.items) == [ref]


async def test_contains_ignores_case() -> None:
    read, _, _ = await read_after_cut(contains="error upstream")

    assert [line.split(":")[0] for line in read.content.splitlines()[1:]] == [
        str(n) for n in ERROR_LINES
    ]


async def test_start_line_and_lines_give_that_range_and_how_to_go_on() -> None:
    read, _, _ = await read_after_cut(start_line=120, lines=5)

    lines = read.content.splitlines()
    assert lines[0].endswith(": lines 120-124 of 600")
    log_lines = LOG.splitlines()
    assert lines[1:6] == [f"{n}: {log_lines[n - 1]}" for n in range(120, 125)]
    assert re.fullmatch(
        r'\[lines 125-600 not shown: read_artifact\(ref="[^"]+", start_line=125\)\]', lines[6]
    )


async def test_a_read_is_bounded_and_says_where_to_go_on() -> None:
    artifacts = InMemoryArtifacts()

    read, _, _ = await read_after_cut(artifacts, start_line=1, lines=500)

    assert len(read.content) <= DEFAULT_OUTPUT_BOUND
    assert read.artifact is None and len(artifacts.items) == 1  # never cut into a new one
    lines = read.content.splitlines()
    last_shown = int(lines[-2].split(":")[0])
    assert 50 < last_shown < 500
    assert lines[-1].startswith(f"[lines {last_shown + 1}-600 not shown: read_artifact(ref=")
    assert lines[-1].endswith(f", start_line={last_shown + 1})]")


async def test_an_unknown_ref_is_an_error() -> None:
    artifacts = InMemoryArtifacts()
    model = ScriptedModel(
        [calls(call("read_artifact", "r1", ref="artifact:job-1:c9:77")), text("no such thing")]
    )

    result = await run(make_config(model, tools=[ReadArtifact(artifacts)], artifacts=artifacts))

    assert result.stop_reason is StopReason.COMPLETED
    read = last_tool_result(model.requests[1])
    assert read.is_error
    assert read.content.startswith("Error: no artifact 'artifact:job-1:c9:77' in this job")


async def test_another_jobs_ref_is_no_artifact() -> None:
    artifacts = InMemoryArtifacts()  # one store, as in Redis: the key is the job's
    _, first, _ = await read_after_cut(artifacts, start_line=1, lines=1)
    theirs = last_tool_result(first.requests[1]).artifact
    assert theirs is not None
    model = ScriptedModel([calls(call("read_artifact", "r1", ref=theirs)), text("cannot")])

    await run(
        make_config(
            model,
            tools=[ReadArtifact(artifacts)],
            artifacts=artifacts,
            job_id="job-2",
        )
    )

    read = last_tool_result(model.requests[1])
    assert read.is_error
    assert read.content.startswith(f"Error: no artifact {theirs!r} in this job")
    assert "INFO" not in read.content


async def test_it_is_offered_from_the_first_request_and_the_tools_stay_fixed() -> None:
    _, model, _ = await read_after_cut(contains="ERROR")

    names = [[s.name for s in r.tools] for r in model.requests]
    assert names[0] == ["read_artifact", "tail_log"]  # before anything was cut
    assert all(n == names[0] for n in names)
    assert model.requests[0].tools == model.requests[2].tools


async def test_arguments_are_validated_like_every_tool() -> None:
    artifacts = InMemoryArtifacts()
    model = ScriptedModel(
        [
            calls(call("tail_log", "tail1", host="web-03")),
            then_read(lines=100_000),
            text("done"),
        ]
    )

    await run(
        make_config(model, tools=with_read_artifact([log_tool()], artifacts), artifacts=artifacts)
    )

    read = last_tool_result(model.requests[2])
    assert read.is_error
    assert read.content.startswith("Error: invalid arguments for tool 'read_artifact': lines:")


async def test_start_line_past_the_end_is_an_error() -> None:
    read, _, _ = await read_after_cut(start_line=601)

    assert read.is_error
    assert re.fullmatch(r"Error: start_line 601 is past the end: \S+ has 600 lines", read.content)


async def test_no_match_is_a_result_not_an_error() -> None:
    read, _, _ = await read_after_cut(contains="segfault")

    assert not read.is_error
    assert read.content.endswith(
        'no line contains "segfault" (case-insensitive, lines 1-600 searched)'
    )


async def test_a_long_line_is_shown_around_the_match() -> None:
    line = "x" * 5000 + " ERROR boom " + "y" * 5000
    store = InMemoryArtifacts()
    ref = await store.put("job-1", "c1", f"first\n{line}\nlast\n")
    tool = ReadArtifact(store)

    out = await tool.execute(
        tool.args_model.model_validate({"ref": ref, "contains": "error"}),
        CallContext(job_id="job-1", call_id="r1"),
    )

    row = out.splitlines()[1]
    assert row.startswith("2: …x") and "ERROR boom" in row
    assert f"[line of {len(line)} chars: " in row
    assert len(row) < MAX_LINE_CHARS + 100


async def test_a_result_is_scrubbed_as_the_tool_path_will_find_it() -> None:
    # A line cut inside a redacted value ("password=[reda…") would be scrubbed again, and
    # grow, after the tool returned: the tool scrubs first, so what it measured stays.
    head = "x" * (MAX_LINE_CHARS - len(" password=[reda"))
    store = InMemoryArtifacts()
    ref = await store.put("job-1", "c1", f"{head} password=[redacted] {'y' * 500}\n")
    tool = ReadArtifact(store)

    out = await tool.execute(
        tool.args_model.model_validate({"ref": ref}), CallContext(job_id="job-1", call_id="r1")
    )

    assert out == redact_secrets(out)
    assert "password=[redacted]" in out.splitlines()[1]


async def test_scrubbed_lines_stay_within_the_bound_and_make_no_artifact() -> None:
    secrets = "".join(f"{n} password=[redacted] token: [redacted] ok\n" for n in range(2000))
    artifacts = InMemoryArtifacts()
    model = ScriptedModel(
        [
            calls(call("tail_log", "tail1", host="web-03")),
            then_read(lines=500, contains="password"),
            text("done"),
        ]
    )

    await run(
        make_config(
            model,
            tools=with_read_artifact([log_tool(secrets)], artifacts),
            artifacts=artifacts,
        )
    )

    read = last_tool_result(model.requests[2])
    assert not read.is_error and read.artifact is None
    assert len(read.content) <= DEFAULT_OUTPUT_BOUND
    assert len(artifacts.items) == 1
    assert read.content.splitlines()[-1].startswith("[")  # how to read on, kept whole


def test_a_catalogue_tool_of_that_name_is_shadowed(caplog: pytest.LogCaptureFixture) -> None:
    impostor = log_tool()
    impostor = FunctionTool(
        name="read_artifact", description="x", args_model=HostArgs, fn=impostor.fn
    )

    with caplog.at_level(logging.WARNING, logger="bot.agent.read_artifact"):
        tools = with_read_artifact([log_tool(), impostor], InMemoryArtifacts())

    assert [t.name for t in tools] == ["tail_log", "read_artifact"]
    assert isinstance(tools[1], ReadArtifact)
    assert "not offered" in caplog.text


def test_it_is_read_only_and_parallel_safe() -> None:
    tool = ReadArtifact(InMemoryArtifacts())

    assert tool.category == "read_only" and runs_in_parallel(tool)


async def test_without_the_tool_the_note_names_no_tool() -> None:
    # The bare core offers only what it is given: a cut note never names a tool the
    # model cannot call (a job always has it, see with_read_artifact).
    model = ScriptedModel([calls(call("tail_log", "tail1", host="web-03")), text("done")])

    await run(make_config(model, tools=[log_tool()]))

    cut = last_tool_result(model.requests[1])
    assert "read_artifact" not in cut.content
    assert cut.content.splitlines()[-1].endswith(f"stored as artifact {cut.artifact}]")
    with pytest.raises(ToolError):
        await ReadArtifact(InMemoryArtifacts()).execute(
            ReadArtifact.args_model.model_validate({"ref": str(cut.artifact)}),
            CallContext(job_id="job-1", call_id="r1"),
        )
