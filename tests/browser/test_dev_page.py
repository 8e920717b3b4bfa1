"""The `opsloop dev` page in headless Chromium: the demo incident end to end, a
correction mid-turn, and the approver policy as people see it."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Dev, screenshot_path

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the module's browser and stack

# A hang guard, not a speed check: on 2 cores with the whole suite running, a dev stack's
# resumed job can take most of 30 s to reach its next step.
TIMEOUT_MS = 60_000
THREAD = '[data-testid="thread"]'


async def open_page(browser: Any, dev: Dev, user: str) -> Any:
    page = await browser.new_page(viewport={"width": 1280, "height": 860})
    await page.goto(f"{dev.url}?user={user}")
    await page.wait_for_selector('[data-testid="connection"][data-state="live"]')
    return page


async def act_as(page: Any, user: str) -> None:
    await page.select_option('[data-testid="user-switcher"]', user)
    await page.wait_for_selector(f'body[data-user="{user}"]')
    await page.wait_for_selector('[data-testid="connection"][data-state="live"]')


async def mention(page: Any, text: str) -> None:
    await page.fill('[data-testid="composer"]', text)
    await page.click('[data-testid="send"]')
    posted = page.locator(
        '[data-testid="channel-messages"] [data-testid="message"]', has_text=text[9:]
    )
    await posted.first.wait_for(timeout=TIMEOUT_MS)
    await page.wait_for_selector(f"{THREAD}:not([hidden])", timeout=TIMEOUT_MS)  # opens itself


def bot_text(page: Any, text: str) -> str:
    return f'{THREAD} [data-testid="message"].bot:has-text("{text}")'


async def test_the_demo_incident_from_mention_to_answer(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UALICE")
    assert "demo model" in await page.inner_text('[data-testid="model-label"]')
    await mention(page, "@opsloop web is slow, look into it")

    # The status message appears in the thread and updates in place.
    status = page.locator(f'{THREAD} [data-testid="message"].bot').first
    await status.wait_for(timeout=TIMEOUT_MS)
    approve = page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]')
    await approve.wait_for(timeout=TIMEOUT_MS)
    await page.wait_for_selector(bot_text(page, "Waiting for approval"), timeout=TIMEOUT_MS)
    await page.screenshot(path=screenshot_path("incident-card"))  # the README's: its story

    # The approver approves; the card says so and the restart really happens.
    pid_before = (dev.folder / "web.pid").read_text().strip()
    await act_as(page, "UBOB")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').click()
    await page.wait_for_selector(bot_text(page, "Approved by"), timeout=TIMEOUT_MS)
    await page.wait_for_selector(bot_text(page, "restarted"), timeout=TIMEOUT_MS)
    await page.wait_for_selector(bot_text(page, "Done"), timeout=TIMEOUT_MS)
    assert (dev.folder / "web.pid").read_text().strip() != pid_before
    assert await approve.count() == 0  # every button of the card is gone
    await page.screenshot(path=screenshot_path("incident-answer"))


async def test_a_strangers_click_is_refused_privately(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UALICE")
    await mention(page, "@opsloop web is slow, look into it")
    approve = page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]')
    await approve.wait_for(timeout=TIMEOUT_MS)

    await act_as(page, "UMALLORY")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').click()
    ephemeral = page.locator('[data-testid="ephemeral"]')
    await ephemeral.first.wait_for(timeout=TIMEOUT_MS)
    assert "approver" in await ephemeral.first.inner_text()
    assert await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').count()
    await page.screenshot(path=screenshot_path("stranger-refused"))

    await act_as(page, "UBOB")  # someone else's ephemeral is not shown to bob
    assert await page.locator('[data-testid="ephemeral"]').count() == 0


async def test_a_correction_mid_turn_is_taken_in_and_acknowledged(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UALICE")
    await mention(page, "@opsloop web is slow, look into it")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Deny"]').wait_for(
        timeout=TIMEOUT_MS
    )
    await page.fill('[data-testid="thread-composer"]', "don't restart, show me the logs first")
    await page.click('[data-testid="thread-send"]')
    # Heard while the card waits (👀), before anyone decides: the next step takes it in.
    correction = page.locator(
        f'{THREAD} [data-testid="message"]:has-text("show me the logs first")'
    )
    await correction.locator('[data-testid="reaction"][data-name="eyes"]').wait_for(
        timeout=TIMEOUT_MS
    )

    await act_as(page, "UBOB")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Deny"]').click()
    await page.wait_for_selector(bot_text(page, "Denied by"), timeout=TIMEOUT_MS)
    await page.screenshot(path=screenshot_path("correction"))


async def test_the_first_visit_hint_says_who_is_who_until_dismissed(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UMALLORY")
    hint = page.locator('[data-testid="first-hint"]')
    await hint.wait_for(timeout=TIMEOUT_MS)
    people = await page.locator('[data-testid="hint-people"] li').all_inner_texts()
    assert [p.split(" ")[0] for p in people] == ["alice", "bob", "mallory"]
    assert "requester" in people[0] and "approver" in people[1] and "stranger" in people[2]
    await page.click('[data-testid="hint-text"]')  # puts the suggestion in the message box
    assert await page.input_value('[data-testid="composer"]') == (
        "@opsloop web is slow, look into it"
    )

    await page.click('[data-testid="dismiss-hint"]')
    assert not await hint.is_visible()
    await page.reload()
    await page.wait_for_selector('[data-testid="connection"][data-state="live"]')
    assert not await hint.is_visible()  # not shown again in this browser
