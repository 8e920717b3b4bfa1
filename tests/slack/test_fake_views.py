"""The fake Slack's modals behave as Slack's: trigger ids, views refused and held, submissions
built and their answers judged.

Every Web API call goes through slack-sdk's real ``AsyncWebClient``; submissions are posted
to a real loopback HTTP bot (and over Socket Mode to a real bolt ``AsyncApp``).
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qs

import pytest
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.emulator.sender import (
    NO_ANSWER,
    TRIGGER_TTL_S,
    _trigger_id,
    read_trigger,
    trigger_id,
    view_submission,
)
from bot.emulator.slack import FakeSlack
from bot.emulator.slack_socket import FakeSocketMode
from bot.emulator.slack_views import TROUBLE, client_errors, modal_errors

TOKEN = "xoxb-test"
APP_TOKEN = "xapp-1-A0OPSLOOP-1-abc"
SECRET = "views-test-secret"
USER = "UBOB"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=slack.api_url)


def plain(text: str) -> dict[str, str]:
    return {"type": "plain_text", "text": text}


def option(value: str, text: str | None = None) -> dict[str, Any]:
    return {"text": plain(text or value), "value": value}


def edit_view() -> dict[str, Any]:
    """The bot's Edit modal, as the contract gives it."""
    mode = [option("fast"), option("slow")]
    force = [option("true"), option("false")]
    return {
        "type": "modal",
        "callback_id": "opsloop_edit",
        "private_metadata": json.dumps({"job": "j1", "call": "c1"}),
        "title": plain("Edit before approving"),
        "submit": plain("Approve edited"),
        "close": plain("Cancel"),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "*scale* web"}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "proposed by the model"}]},
            {
                "type": "input",
                "block_id": "arg:replicas",
                "label": plain("replicas"),
                "hint": plain("how many"),
                "optional": False,
                "element": {
                    "type": "number_input",
                    "action_id": "value",
                    "is_decimal_allowed": False,
                    "initial_value": "5",
                },
            },
            {
                "type": "input",
                "block_id": "arg:mode",
                "label": plain("mode"),
                "element": {
                    "type": "static_select",
                    "action_id": "value",
                    "options": mode,
                    "initial_option": mode[0],
                },
            },
            {
                "type": "input",
                "block_id": "arg:force",
                "label": plain("force"),
                "element": {
                    "type": "radio_buttons",
                    "action_id": "value",
                    "options": force,
                    "initial_option": force[1],
                },
            },
            {
                "type": "input",
                "block_id": "arg:name",
                "label": plain("name"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": "value",
                    "initial_value": "web-03",
                    "multiline": False,
                },
            },
            {
                "type": "input",
                "block_id": "arg:tags",
                "label": plain("tags"),
                "optional": True,
                "element": {
                    "type": "checkboxes",
                    "action_id": "value",
                    "options": [option("a"), option("b")],
                },
            },
            {
                "type": "input",
                "block_id": "arg:zones",
                "label": plain("zones"),
                "optional": True,
                "element": {
                    "type": "multi_static_select",
                    "action_id": "value",
                    "options": [option("eu"), option("us")],
                    "initial_options": [option("eu")],
                },
            },
        ],
    }


async def error_of(call: Any) -> dict[str, Any]:
    with pytest.raises(SlackApiError) as info:
        await call
    return dict(info.value.response.data)  # type: ignore[arg-type]


async def open_edit(client: AsyncWebClient, view: dict[str, Any] | None = None) -> str:
    opened = await client.views_open(trigger_id=trigger_id(USER), view=view or edit_view())
    return str(opened["view"]["id"])


# ---- trigger ids ----------------------------------------------------------------------------


def test_trigger_ids_are_shaped_like_slacks_and_carry_their_time_and_user() -> None:
    made = trigger_id("UBOB", issued_at=1_700_000_000.123)
    assert re.fullmatch(r"\d+\.\d+\.[0-9a-f]+", made)
    read = read_trigger(made)
    assert read is not None and (read.issued_at, read.user) == (1_700_000_000.123, "UBOB")
    assert read_trigger("12345.98765.abcd2358fdea") is None  # Slack's example: not one of ours
    fresh = read_trigger(_trigger_id())
    assert fresh is not None and fresh.user is None and abs(fresh.issued_at - time.time()) < 5


async def test_views_open_needs_a_trigger(slack: FakeSlack, client: AsyncWebClient) -> None:
    error = await error_of(client.api_call("views.open", json={"view": edit_view()}))
    assert error["error"] == "invalid_arguments"


async def test_an_unparseable_trigger_is_invalid(client: AsyncWebClient) -> None:
    error = await error_of(client.views_open(trigger_id="T.1", view=edit_view()))
    assert error["error"] == "invalid_trigger_id"


async def test_a_trigger_older_than_3_s_is_expired(client: AsyncWebClient) -> None:
    old = trigger_id(USER, issued_at=time.time() - TRIGGER_TTL_S - 0.5)
    error = await error_of(client.views_open(trigger_id=old, view=edit_view()))
    assert error["error"] == "expired_trigger_id"
    recent = trigger_id(USER, issued_at=time.time() - TRIGGER_TTL_S + 2)
    assert (await client.views_open(trigger_id=recent, view=edit_view()))["ok"]


async def test_a_trigger_is_used_once(client: AsyncWebClient) -> None:
    once = trigger_id(USER)
    assert (await client.views_open(trigger_id=once, view=edit_view()))["ok"]
    error = await error_of(client.views_open(trigger_id=once, view=edit_view()))
    assert error["error"] == "exchanged_trigger_id"


async def test_a_refused_view_does_not_spend_its_trigger(client: AsyncWebClient) -> None:
    once = trigger_id(USER)
    broken = {**edit_view(), "title": plain("x" * 25)}
    assert (await error_of(client.views_open(trigger_id=once, view=broken)))["error"]
    assert (await client.views_open(trigger_id=once, view=edit_view()))["ok"]


# ---- views refused as Slack refuses them ----------------------------------------------------


def change(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set (or, with ``...``, delete) the item at ``path`` ("blocks/2/element/type")."""

    def apply(view: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = view
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if value is ...:
            del node[key]
        else:
            node[key] = value

    return apply


RULES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "type modal": (change("type", "home"), "/view/type"),
    "title required": (change("title", ...), "/view/title"),
    "title plain_text": (change("title", {"type": "mrkdwn", "text": "x"}), "/view/title/type"),
    "title <= 24": (change("title", plain("x" * 25)), "/view/title/text"),
    "submit <= 24": (change("submit", plain("x" * 25)), "/view/submit/text"),
    "close <= 24": (change("close", plain("x" * 25)), "/view/close/text"),
    "private_metadata <= 3000": (change("private_metadata", "x" * 3001), "/view/private_metadata"),
    "callback_id <= 255": (change("callback_id", "x" * 256), "/view/callback_id"),
    "blocks <= 100": (change("blocks", [{"type": "divider"}] * 101), "/view/blocks"),
    "inputs need submit": (change("submit", ...), "/view"),
    "label required": (change("blocks/2/label", ...), "/view/blocks/2/label"),
    "label <= 2000": (change("blocks/2/label", plain("x" * 2001)), "/view/blocks/2/label/text"),
    "hint <= 2000": (change("blocks/2/hint", plain("x" * 2001)), "/view/blocks/2/hint/text"),
    "element an input kind": (
        change("blocks/2/element/type", "button"),
        "/view/blocks/2/element/type",
    ),
    "block_id unique": (change("blocks/3/block_id", "arg:replicas"), "/view/blocks/3/block_id"),
    "block_id <= 255": (change("blocks/2/block_id", "b" * 256), "/view/blocks/2/block_id"),
    "action_id <= 255": (
        change("blocks/2/element/action_id", "a" * 256),
        "/view/blocks/2/element/action_id",
    ),
    "text initial_value <= 3000": (
        change("blocks/5/element/initial_value", "x" * 3001),
        "/view/blocks/5/element/initial_value",
    ),
    "text max_length <= 3000": (
        change("blocks/5/element/max_length", 3001),
        "/view/blocks/5/element/max_length",
    ),
    "number needs is_decimal_allowed": (
        change("blocks/2/element/is_decimal_allowed", ...),
        "/view/blocks/2/element",
    ),
    "number initial a number": (
        change("blocks/2/element/initial_value", "five"),
        "/view/blocks/2/element/initial_value",
    ),
    "number initial whole without decimals": (
        change("blocks/2/element/initial_value", "2.5"),
        "/view/blocks/2/element/initial_value",
    ),
    "number initial within bounds": (
        change("blocks/2/element/max_value", "4"),
        "/view/blocks/2/element/initial_value",
    ),
    "select has options": (
        change("blocks/3/element/options", []),
        "/view/blocks/3/element/options",
    ),
    "select <= 100 options": (
        change("blocks/3/element/options", [option(f"v{i}") for i in range(101)]),
        "/view/blocks/3/element/options",
    ),
    "option text <= 75": (
        change("blocks/3/element/options/1/text", plain("x" * 76)),
        "/view/blocks/3/element/options/1/text/text",
    ),
    "option value <= 150": (
        change("blocks/3/element/options/1/value", "x" * 151),
        "/view/blocks/3/element/options/1/value",
    ),
    "initial_option among options": (
        change("blocks/3/element/initial_option", option("medium")),
        "/view/blocks/3/element/initial_option",
    ),
    "radio <= 10 options": (
        change("blocks/4/element/options", [option(f"v{i}") for i in range(11)]),
        "/view/blocks/4/element/options",
    ),
    "radio initial among options": (
        change("blocks/4/element/initial_option", option("maybe")),
        "/view/blocks/4/element/initial_option",
    ),
    "checkboxes <= 10 options": (
        change("blocks/6/element/options", [option(f"v{i}") for i in range(11)]),
        "/view/blocks/6/element/options",
    ),
    "other blocks as in messages": (
        change("blocks/0/text", {"type": "mrkdwn", "text": "x" * 3001}),
        "/view/blocks/0/text/text",
    ),
}


def test_the_contract_modal_is_taken_as_it_is() -> None:
    assert modal_errors(edit_view()) == []


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_views_open_refuses_a_view_breaking(rule: str, client: AsyncWebClient) -> None:
    view = edit_view()
    breaking, pointer = RULES[rule]
    breaking(view)
    error = await error_of(client.views_open(trigger_id=trigger_id(USER), view=view))
    assert error["error"] == "invalid_arguments"
    messages = error["response_metadata"]["messages"]
    assert any(
        m.startswith("[ERROR] ") and m.endswith(f"[json-pointer:{pointer}]") for m in messages
    )


def test_limits_are_inclusive() -> None:
    view = edit_view()
    view["title"] = plain("x" * 24)
    view["private_metadata"] = "x" * 3000
    view["blocks"][3]["element"]["options"][1] = option("x" * 150, "y" * 75)
    view["blocks"][4]["element"]["options"] = [option(f"v{i}") for i in range(10)]
    view["blocks"][4]["element"].pop("initial_option")
    assert modal_errors(view) == []


async def test_a_view_over_250_kb_is_too_large(client: AsyncWebClient) -> None:
    view = edit_view()
    view["blocks"] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 2900}, "block_id": f"b{i}"}
        for i in range(90)
    ]
    view.pop("submit")
    error = await error_of(client.views_open(trigger_id=trigger_id(USER), view=view))
    assert error["error"] == "view_too_large"


# ---- what the fake holds --------------------------------------------------------------------


async def test_an_opened_view_is_held_for_the_triggers_user(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    opened = await client.views_open(trigger_id=trigger_id(USER), view=edit_view())
    held = await slack.views.wait_opened(user=USER)
    assert held.id == opened["view"]["id"] and held.id.startswith("V")
    assert held.user == USER and held.open and held.errors == {}
    assert held.view == opened["view"]
    assert held.hash == opened["view"]["hash"] and held.callback_id == "opsloop_edit"
    assert json.loads(held.private_metadata) == {"job": "j1", "call": "c1"}
    assert [v.id for v in slack.views.opened(USER)] == [held.id]
    assert slack.views.opened("UALICE") == []
    assert slack.views.get(held.id).view["root_view_id"] == held.id


async def test_update_by_id_or_external_id_changes_the_hash(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    view = {**edit_view(), "external_id": "edit-j1-c1"}
    view_id = await open_edit(client, view)
    before = slack.views.get(view_id).hash
    new = {**view, "title": plain("Already approved")}
    updated = await client.views_update(view_id=view_id, hash=before, view=new)
    assert updated["view"]["id"] == view_id and updated["view"]["hash"] != before
    assert slack.views.get(view_id).view["title"]["text"] == "Already approved"
    again = await client.views_update(external_id="edit-j1-c1", view=edit_view())
    assert again["view"]["id"] == view_id


async def test_update_with_a_stale_hash_is_a_conflict(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    view_id = await open_edit(client)
    stale = slack.views.get(view_id).hash
    await client.views_update(view_id=view_id, view=edit_view())
    error = await error_of(client.views_update(view_id=view_id, hash=stale, view=edit_view()))
    assert error["error"] == "hash_conflict"


async def test_update_of_an_unknown_view_is_not_found(client: AsyncWebClient) -> None:
    error = await error_of(client.views_update(view_id="V404", view=edit_view()))
    assert error["error"] == "not_found"
    error = await error_of(client.views_update(external_id="nope", view=edit_view()))
    assert error["error"] == "not_found"


async def test_update_is_checked_like_open(slack: FakeSlack, client: AsyncWebClient) -> None:
    view_id = await open_edit(client)
    error = await error_of(
        client.views_update(view_id=view_id, view={**edit_view(), "submit": None})
    )
    assert error["error"] == "invalid_arguments"
    assert slack.views.get(view_id).view["submit"]["text"] == "Approve edited"


async def test_push_stacks_at_most_three_views(slack: FakeSlack, client: AsyncWebClient) -> None:
    root = await open_edit(client)
    second = await client.views_push(trigger_id=trigger_id(USER), view=edit_view())
    assert second["view"]["previous_view_id"] == root and second["view"]["root_view_id"] == root
    await client.views_push(trigger_id=trigger_id(USER), view=edit_view())
    error = await error_of(client.views_push(trigger_id=trigger_id(USER), view=edit_view()))
    assert error["error"] == "push_limit_reached"
    top = slack.views.top(USER)
    assert top is not None and top.view["previous_view_id"] == second["view"]["id"]


# ---- the submission ---------------------------------------------------------------------------


async def test_a_submission_carries_the_view_and_its_state_as_slack_sends_them(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    view_id = await open_edit(client)
    held = slack.views.get(view_id)
    values = {"arg:replicas": "3", "arg:mode": "slow", "arg:force": "true", "arg:tags": ["b"]}
    payload = view_submission(held.view, user_id=USER, user_name="bob", values=values)
    assert payload["type"] == "view_submission"
    assert {"team", "user", "api_app_id", "token", "trigger_id", "view"} <= set(payload)
    assert payload["user"]["id"] == USER
    assert read_trigger(payload["trigger_id"]) is not None
    view = payload["view"]
    assert (view["id"], view["hash"], view["callback_id"]) == (view_id, held.hash, "opsloop_edit")
    assert view["private_metadata"] == held.private_metadata
    state = view["state"]["values"]
    assert state["arg:replicas"] == {"value": {"type": "number_input", "value": "3"}}
    assert state["arg:mode"]["value"]["selected_option"] == option("slow")
    assert state["arg:force"]["value"] == {
        "type": "radio_buttons",
        "selected_option": option("true"),
    }
    assert state["arg:name"]["value"] == {
        "type": "plain_text_input",
        "value": "web-03",
    }  # as opened
    assert state["arg:tags"]["value"] == {"type": "checkboxes", "selected_options": [option("b")]}
    assert state["arg:zones"]["value"]["selected_options"] == [option("eu")]
    assert set(state) == {b["block_id"] for b in held.view["blocks"] if b["type"] == "input"}


async def test_a_submission_refuses_what_the_view_cannot_hold_unless_raw(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    held = slack.views.get(await open_edit(client))
    with pytest.raises(ValueError, match="medium"):
        view_submission(held.view, user_id=USER, user_name="bob", values={"arg:mode": "medium"})
    with pytest.raises(ValueError, match="arg:nope"):
        view_submission(held.view, user_id=USER, user_name="bob", values={"arg:nope": "1"})
    raw = {"arg:replicas": {"type": "number_input", "value": "abc"}}
    payload = view_submission(held.view, user_id=USER, user_name="bob", raw=raw)
    assert payload["view"]["state"]["values"]["arg:replicas"]["value"]["value"] == "abc"


def test_slacks_client_refuses_an_empty_required_input_or_a_wrong_number() -> None:
    view = edit_view()
    view["blocks"][2]["element"]["max_value"] = "10"
    said = client_errors(view, {"arg:replicas": "2.5", "arg:name": "", "arg:mode": "fast"})
    assert said["arg:replicas"] and said["arg:name"] and "arg:tags" not in said
    assert client_errors(view, {"arg:replicas": "11"})["arg:replicas"]
    full = {"arg:replicas": "3", "arg:mode": "fast", "arg:force": "true", "arg:name": "web"}
    assert client_errors(view, full) == {}


# ---- the bot's answer, judged -----------------------------------------------------------------


async def test_an_empty_200_closes_the_view(slack: FakeSlack, client: AsyncWebClient) -> None:
    view_id = await open_edit(client)
    answer = await slack.views.answer(view_id, 200, b"")
    assert answer.outcome == "closed" and not answer.refused
    assert not slack.views.get(view_id).open and slack.views.opened(USER) == []
    with pytest.raises(LookupError):
        await slack.views.answer(view_id, 200, b"")


async def test_errors_on_input_blocks_are_shown_and_the_view_stays(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    view_id = await open_edit(client)
    body = {"response_action": "errors", "errors": {"arg:replicas": "must be at most 4"}}
    answer = await slack.views.answer(view_id, 200, json.dumps(body).encode())
    assert answer.outcome == "errors" and answer.errors == {"arg:replicas": "must be at most 4"}
    held = slack.views.get(view_id)
    assert held.open and held.errors == answer.errors and held.answers == [answer]


@pytest.mark.parametrize(
    ("status", "body", "why"),
    [
        (200, {"response_action": "errors", "errors": {"nope": "x"}}, "'nope'"),
        (200, {"response_action": "errors", "errors": {"arg:replicas": ""}}, "not text"),
        (200, {"response_action": "errors", "errors": {}}, "errors object"),
        (200, {"response_action": "close"}, "unknown response_action"),
        (200, {"text": "ok"}, "unknown response_action"),
        (200, "not json", "neither empty nor JSON"),
        (200, "[1]", "not a JSON object"),
        (500, "", "HTTP 500"),
        (204, "", "HTTP 204"),
        (NO_ANSWER, None, "within 3 s"),
    ],
)
async def test_an_answer_slack_cannot_apply_is_refused_and_changes_nothing(
    slack: FakeSlack, client: AsyncWebClient, status: int, body: Any, why: str
) -> None:
    view_id = await open_edit(client)
    before = slack.views.get(view_id)
    sent = json.dumps(body).encode() if isinstance(body, dict) else body
    answer = await slack.views.answer(view_id, status, sent)
    assert answer.refused and answer.shown == TROUBLE
    assert answer.reason is not None and why in answer.reason
    after = slack.views.get(view_id)
    assert after.open and after.view == before.view and after.errors == {}


async def test_errors_may_not_name_a_section_block(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    view = edit_view()
    view["blocks"][0]["block_id"] = "explain"
    view_id = await open_edit(client, view)
    body = {"response_action": "errors", "errors": {"explain": "no"}}
    answer = await slack.views.answer(view_id, 200, json.dumps(body))
    assert answer.refused and "'explain'" in (answer.reason or "")


async def test_update_replaces_the_view_once_it_is_a_valid_modal(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    view_id = await open_edit(client)
    before = slack.views.get(view_id).hash
    done = {
        "type": "modal",
        "title": plain("Edit before approving"),
        "close": plain("Close"),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "already approved"}}],
    }
    broken = {**done, "blocks": edit_view()["blocks"]}  # inputs, and no submit
    refused = await slack.views.answer(
        view_id, 200, json.dumps({"response_action": "update", "view": broken})
    )
    assert refused.refused and "/view" in (refused.reason or "")
    answer = await slack.views.answer(
        view_id, 200, json.dumps({"response_action": "update", "view": done})
    )
    assert answer.outcome == "updated" and answer.view is not None
    held = slack.views.get(view_id)
    assert held.open and held.hash != before and held.view == answer.view
    assert held.view["blocks"][0]["text"]["text"] == "already approved"


async def test_push_stacks_and_clear_closes_every_view(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    root = await open_edit(client)
    push = json.dumps({"response_action": "push", "view": edit_view()})
    pushed = await slack.views.answer(root, 200, push)
    assert pushed.outcome == "pushed" and pushed.view is not None
    top = pushed.view["id"]
    with pytest.raises(LookupError):  # the root is under the pushed view now
        await slack.views.answer(root, 200, b"")
    third = await slack.views.answer(top, 200, push)
    assert third.outcome == "pushed" and third.view is not None
    assert (await slack.views.answer(third.view["id"], 200, push)).refused  # a fourth
    cleared = await slack.views.answer(
        third.view["id"], 200, json.dumps({"response_action": "clear"})
    )
    assert cleared.outcome == "cleared" and slack.views.opened() == []


async def test_the_close_button_closes_the_view_shown(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    root = await open_edit(client)
    pushed = await client.views_push(trigger_id=trigger_id(USER), view=edit_view())
    await slack.views.close(pushed["view"]["id"])
    top = slack.views.top(USER)
    assert top is not None and top.id == root


# ---- over the wire --------------------------------------------------------------------------


async def test_submit_posts_signed_and_judges_the_bots_answer(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    received: list[web.Request] = []
    bodies: list[bytes] = []
    answers = [
        web.json_response({"response_action": "errors", "errors": {"arg:replicas": "too many"}}),
        web.Response(status=200),
    ]

    async def handle(request: web.Request) -> web.Response:
        received.append(request)
        bodies.append(await request.read())
        return answers[len(bodies) - 1]

    app = web.Application()
    app.router.add_post("/slack/events", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    try:
        view_id = await open_edit(client)
        held = slack.views.get(view_id)
        payload = view_submission(
            held.view, user_id=USER, user_name="bob", values={"arg:replicas": "9"}
        )
        first = await slack.views.submit(url, payload, secret=SECRET)
        assert first.outcome == "errors" and slack.views.get(view_id).errors == first.errors
        verifier = SignatureVerifier(SECRET)
        headers = received[0].headers
        assert verifier.is_valid(
            bodies[0], headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
        )
        sent = json.loads(parse_qs(bodies[0].decode())["payload"][0])
        assert sent == payload
        retry = view_submission(
            held.view, user_id=USER, user_name="bob", values={"arg:replicas": "3"}
        )
        second = await slack.views.submit(url, retry, secret=SECRET)
        assert second.outcome == "closed" and not slack.views.get(view_id).open
    finally:
        await runner.cleanup()


async def test_a_socket_mode_ack_payload_is_judged_like_an_http_answer() -> None:
    slack = FakeSlack()
    socket = FakeSocketMode(slack)
    async with slack:
        web_client = AsyncWebClient(token=TOKEN, base_url=slack.api_url)
        app = AsyncApp(client=web_client)
        seen: list[dict[str, Any]] = []

        @app.view("opsloop_edit")
        async def edited(ack: Any, body: dict[str, Any]) -> None:
            seen.append(body)
            state = body["view"]["state"]["values"]
            if state["arg:replicas"]["value"]["value"] != "3":
                await ack(response_action="errors", errors={"arg:replicas": "3 at most"})
            else:
                await ack()

        handler = AsyncSocketModeHandler(app, APP_TOKEN, web_client=web_client)
        await handler.connect_async()  # type: ignore[no-untyped-call]
        try:
            await socket.wait_connected()
            view_id = await open_edit(web_client)
            held = slack.views.get(view_id)
            payload = view_submission(
                held.view, user_id=USER, user_name="bob", values={"arg:replicas": "7"}
            )
            ack = await socket.send_interactive(copy.deepcopy(payload))
            assert ack is not None and ack["payload"]["response_action"] == "errors"
            answer = await socket.submit_view(payload)
            assert answer.outcome == "errors" and answer.errors == {"arg:replicas": "3 at most"}
            fixed = view_submission(
                held.view, user_id=USER, user_name="bob", values={"arg:replicas": "3"}
            )
            assert (await socket.submit_view(fixed)).outcome == "closed"
            assert seen[0]["type"] == "view_submission" and len(seen) == 3
        finally:
            await handler.close_async()  # type: ignore[no-untyped-call]
            await socket.close()
