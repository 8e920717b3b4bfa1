"""End to end over the real protocols: `opsloop serve` as a process, signed events, the
fake Slack Web API, the scripted model server, a real redis-server, tools.yml command
tools as real processes."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .conftest import StartBot
from .harness import ScriptedModel, mention, new_event_id, reply, sign, steps, twin

TOOLS = """\
tools:
  - name: check_host
    description: Check a host.
    params:
      host: {type: string, pattern: "^[a-z0-9-]+$", description: Host name}
    run: ["echo", "checked", "{host}"]
"""


def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "tools.yml"
    path.write_text(TOOLS)
    return str(path)


def check_then_answer(answer: str) -> object:
    def policy(request: ScriptedRequest) -> Reply:
        if request.tool_results() == 0:
            return Reply(
                content="Checking web-03.",
                tool_calls=[ScriptedCall("check_host", {"host": "web-03"})],
            )
        return Reply(content=answer)

    return policy


def posted(slack: FakeSlack, text: str) -> bool:
    return any(p.get("text") == text for p in slack.calls_of("chat.postMessage"))


async def test_mention_runs_a_tool_and_answers_in_the_thread(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    answer = "web-03 is fine:\n\n| host | state |\n|---|---|\n| web-03 | `checked web-03` |"
    model.policy = check_then_answer(answer)  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path))
    event = mention("C1", "U1", "web-03 is at 95% CPU, look into it")

    status, _ = await serve.send(event)

    assert status == 200
    await slack.wait_for(lambda: posted(slack, answer), timeout=30)
    posts = slack.calls_of("chat.postMessage")
    assert posts[0]["thread_ts"] == event["ts"] and posts[0]["text"].startswith("Working")
    final = next(p for p in posts if p.get("text") == answer)
    assert final["thread_ts"] == event["ts"]
    assert final["blocks"][0] == {"type": "markdown", "text": answer}
    assert [b["type"] for b in final["blocks"][1:]] == ["context_actions"]  # 👍/👎
    # The tool ran as a real process and its output reached the model.
    second = model.requests[1].messages
    assert any(m.get("role") == "tool" and "checked web-03" in m["content"] for m in second)
    # The stable prefix: same system prompt and tools in every request of the job.
    first = model.requests[0]
    assert first.messages[0] == second[0] and first.tools == model.requests[1].tools
    status_ts = next(m.ts for m in slack.messages("C1", event["ts"]) if m.user == "UBOT")
    await slack.wait_for(lambda: "Done" in slack.message("C1", status_ts).text, timeout=30)
    # The ended status message keeps each tool that ran, with its result in one line,
    # and names the job for `opsloop trace`.
    ended = str(slack.message("C1", status_ts).blocks)
    assert "`check_host` checked web-03" in ended
    assert f"job `C1:{event['ts']}:j1`" in ended


async def test_a_reply_mid_turn_reaches_the_next_request_and_gets_eyes(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path))
    event = mention("C1", "U1", "check web-03")
    later = reply("C1", "U2", "show me the logs first", thread_ts=event["ts"])
    sent: list[int] = []

    async def first(request: ScriptedRequest) -> Reply:
        status, _ = await serve.send(later)  # while the model works on step 1
        sent.append(status)
        return Reply(content="Checking.", tool_calls=[ScriptedCall("check_host", {"host": "a"})])

    answers = iter([Reply(content="Here are the logs.")])

    async def policy(request: ScriptedRequest) -> Reply:
        return await first(request) if not sent else next(answers)

    model.policy = policy  # type: ignore[assignment]
    await serve.send(event)
    await slack.wait_for(
        lambda: any(
            p.get("text") == "Here are the logs." for p in slack.calls_of("chat.postMessage")
        ),
        timeout=30,
    )
    assert sent == [200]
    last_user = [m for m in model.requests[1].messages if m.get("role") == "user"][-1]
    assert last_user["content"] == "<@U2>: show me the logs first"
    assert "eyes" in slack.reactions("C1", later["ts"])


async def test_the_mention_twin_and_a_retry_start_nothing_new(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content="All good."))  # type: ignore[arg-type]
    serve = await bot()
    event = mention("C1", "U1", "status?")
    event_id = new_event_id()
    assert (await serve.send(event, event_id=event_id))[0] == 200
    assert (await serve.send(twin(event)))[0] == 200
    assert (await serve.send(event, event_id=event_id))[0] == 200  # Slack's retry
    await slack.wait_for(lambda: posted(slack, "All good."), timeout=30)
    assert len(model.requests) == 1
    assert (
        len([p for p in slack.calls_of("chat.postMessage") if p["text"].startswith("Working")]) == 1
    )


async def test_bad_stale_and_missing_signatures_change_nothing(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    serve = await bot()
    from .harness import event_body

    body = event_body(mention("C1", "U1", "hello"))
    assert (await serve.post_event(body, headers=sign(body, "wrong-secret")))[0] == 401
    assert (await serve.post_event(body, headers={}))[0] == 401
    stale = sign(body, serve.secret, timestamp=1_600_000_000)
    assert (await serve.post_event(body, headers=stale))[0] == 401
    assert slack.calls_of("chat.postMessage") == [] and model.requests == []


async def test_redis_down_is_503_and_slacks_redelivery_is_served(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    model.policy = steps(Reply(content="Back up."))  # type: ignore[arg-type]
    serve = await bot()
    event = mention("C1", "U1", "anyone there?")
    event_id = new_event_id()
    redis_server.kill()
    try:
        status, _ = await serve.send(event, event_id=event_id)
        assert status == 503
        assert (await serve.get("/healthz"))[0] == 503
    finally:
        redis_server.start()
    for _ in range(3):  # a pooled connection may fail once after the restart
        status, _ = await serve.send(event, event_id=event_id)
        if status == 200:
            break
    assert status == 200
    await slack.wait_for(lambda: posted(slack, "Back up."), timeout=30)


async def test_the_iteration_limit_ends_with_its_code(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    hosts = iter(range(100))

    def busy(request: ScriptedRequest) -> Reply:
        return Reply(tool_calls=[ScriptedCall("check_host", {"host": f"web-{next(hosts)}"})])

    model.policy = busy  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path), OPSLOOP_MAX_ITERATIONS="2")
    event = mention("C1", "U1", "check everything")
    await serve.send(event)

    def endings() -> list[str]:
        texts = [m.text for m in slack.messages("C1", event["ts"])]
        return [t for t in texts if "`limit_iterations`" in t]

    await slack.wait_for(lambda: bool(endings()), timeout=30)
    assert "iteration limit reached (2/2)" in endings()[0]
    assert len(model.requests) == 2


async def test_a_reply_after_the_answer_starts_a_job_that_sees_the_history(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(  # type: ignore[arg-type]
        Reply(content="web-03 is fine."), Reply(content="web-04 is fine too.")
    )
    serve = await bot()
    event = mention("C1", "U1", "web-03?")
    await serve.send(event)
    await slack.wait_for(lambda: posted(slack, "web-03 is fine."), timeout=30)
    await serve.send(reply("C1", "U1", "and web-04?", thread_ts=event["ts"]))
    await slack.wait_for(lambda: posted(slack, "web-04 is fine too."), timeout=30)

    second = model.requests[1].messages
    contents = [m.get("content") for m in second]
    assert contents[-3:] == ["<@U1>: <@UBOT> web-03?", "web-03 is fine.", "<@U1>: and web-04?"]
