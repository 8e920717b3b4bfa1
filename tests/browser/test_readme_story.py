"""The README's story, step by step, in headless Chromium on `opsloop dev`.

As the README tells it: alice (the requester) mentions the bot, the status message and
the task cards show progress, a restart card waits for an approver; alice replies "don't
restart, show me the logs first" while it waits, and within seconds the card shows her
reply to the people who decide and the reply gets 👀 — before anyone clicks; bob (the
approver) approves; the answer says what truly happened: her message came while the
restart waited and bob approved after it. Everything people read names people (@alice,
@bob), never ids, and no step is left pending after the decision. The README's two
screenshots (``approval-card``, ``answer``) are taken here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import expect

from .conftest import Dev, copy_to_docs, screenshot_path
from .test_dev_page import THREAD, TIMEOUT_MS, act_as, bot_text, mention, open_page

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the module's browser and stack

REPLY = "don't restart, show me the logs first"
HEARD_MS = 5_000  # the card shows the reply and the reply has 👀 within a few seconds
CARD = f'{THREAD} [data-testid="message"].bot:has([data-testid="button"][data-label="Approve"])'
TASK = f'{THREAD} [data-testid="task-card"]'
# A person's id where their name belongs: a mention Slack would not render, a dev id.
IDS = re.compile(r"<@|\bU(?:ALICE|BOB|MALLORY|BOT)\b|\bU0[A-Z0-9]{4,}\b")


async def shown(page: Any, selector: str) -> str:
    return str(await page.locator(selector).inner_text())


def ids_in(texts: list[str]) -> list[str]:
    """Each id shown where a name belongs, with what surrounds it."""
    return [t[max(0, m.start() - 60) : m.end() + 20] for t in texts for m in IDS.finditer(t)]


async def test_the_readme_story_in_the_browser(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UALICE")

    # A first visit says what to type and who is who.
    hint = page.locator('[data-testid="first-hint"]')
    await hint.wait_for(timeout=TIMEOUT_MS)
    said = await hint.inner_text()
    assert "@opsloop web is slow, look into it" in said
    assert re.search(r"alice\W+requester", said) and re.search(r"bob\W+approver", said)

    # 1. The mention: the status message appears in the thread and the steps show.
    await mention(page, "@opsloop web is slow, look into it")
    assert await hint.count() == 0 or not await hint.is_visible()  # a message was sent
    await page.locator(f'{THREAD} [data-testid="message"].bot').first.wait_for(timeout=TIMEOUT_MS)
    await page.wait_for_selector(f'{TASK}[data-status="complete"]', timeout=TIMEOUT_MS)

    # 2. The card: a restart waits for an approver; the status message says so.
    card = page.locator(CARD)
    await card.wait_for(timeout=TIMEOUT_MS)
    assert "web_restart" in await card.inner_text()
    # The note that came with the restart is the card's reason, said once: on the card.
    reason = page.locator(f'{THREAD} [data-testid="message"].bot', has_text="A restart starts")
    await expect(reason).to_have_count(1, timeout=HEARD_MS)
    await page.wait_for_selector(bot_text(page, "Waiting for approval"), timeout=TIMEOUT_MS)

    # 3. alice replies while the card waits: the card shows it, the reply gets 👀, before
    #    anyone clicks.
    await page.fill('[data-testid="thread-composer"]', REPLY)
    await page.click('[data-testid="thread-send"]')
    reply = page.locator(f'{THREAD} [data-testid="message"]:not(.bot)', has_text="logs first")
    await reply.wait_for(timeout=TIMEOUT_MS)
    await reply.locator('[data-testid="reaction"][data-name="eyes"]').wait_for(timeout=HEARD_MS)
    await page.wait_for_selector(f"{CARD}:has-text('show me the logs first')", timeout=HEARD_MS)
    card_text = await card.inner_text()
    assert "alice" in card_text and not IDS.search(card_text), card_text
    await page.screenshot(path=screenshot_path("approval-card"))

    # 4. bob, the approver, approves: the card says so, the restart really happens.
    pid_before = (dev.folder / "web.pid").read_text().strip()
    await act_as(page, "UBOB")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').click()
    await page.wait_for_selector(bot_text(page, "Approved by"), timeout=TIMEOUT_MS)
    decided = page.locator(f'{THREAD} [data-testid="message"].bot', has_text="Approved by")
    assert "@bob" in await decided.first.inner_text()
    assert await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').count() == 0

    # 5. The answer, with the true order; the restart ran.
    answer = page.locator(
        f'{THREAD} [data-testid="message"].bot', has_text="came in while the restart waited"
    )
    await answer.last.wait_for(timeout=TIMEOUT_MS)
    await page.wait_for_selector(bot_text(page, "web is healthy again"), timeout=TIMEOUT_MS)
    await page.wait_for_selector(bot_text(page, "Done"), timeout=TIMEOUT_MS)
    assert (dev.folder / "web.pid").read_text().strip() != pid_before
    final = await shown(page, bot_text(page, "web is healthy again"))
    assert re.search(r"came in while the restart waited for approval; @bob approved it at", final)
    assert "already" not in final
    assert "Logs you asked for" in final
    await page.screenshot(path=screenshot_path("answer"))

    # No step is left pending after the decision, and nothing shows an id for a name
    # (the status message, first in the thread, has a test of its own below).
    assert await page.locator(f'{TASK}[data-status="pending"]').count() == 0
    assert await page.locator(f'{TASK}[data-status="in_progress"]').count() == 0
    messages = page.locator(f'{THREAD} [data-testid="message"]')
    read = [await messages.nth(k).inner_text() for k in range(2, await messages.count())]
    assert ids_in(read) == [], ids_in(read)

    copy_to_docs("approval-card")
    copy_to_docs("answer")


async def test_the_status_message_names_people_not_ids(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UALICE")
    await mention(page, "@opsloop web is slow, look into it")
    await page.locator(CARD).wait_for(timeout=TIMEOUT_MS)
    await act_as(page, "UBOB")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').click()
    await page.wait_for_selector(bot_text(page, "web is healthy again"), timeout=TIMEOUT_MS)
    status = page.locator(f'{THREAD} [data-testid="message"].bot').first
    await expect(status).to_contain_text("Done", timeout=TIMEOUT_MS)
    text = await status.inner_text()
    assert "web_restart" in text
    assert ids_in([text]) == [], text
