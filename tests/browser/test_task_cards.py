"""The demo incident's tool steps as task cards on the `opsloop dev` page: mention → task
cards → approve → answer, in headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import expect

from .conftest import Dev, copy_to_docs, screenshot_path
from .test_dev_page import THREAD, TIMEOUT_MS, act_as, bot_text, mention, open_page

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the module's browser and stack

CARD = f'{THREAD} [data-testid="task-card"]'


async def test_tool_steps_show_as_task_cards_through_an_approval(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UALICE")
    await mention(page, "@opsloop web is slow, look into it")

    # The first read-only step shows as a card in the streamed answer, then completes.
    await page.wait_for_selector(CARD, timeout=TIMEOUT_MS)
    await page.wait_for_selector(f'{CARD}[data-status="complete"]', timeout=TIMEOUT_MS)
    # The change waits for its card: the status says so, and no step is left pending
    # (the change gets its own card when it runs, after the decision).
    await page.wait_for_selector(
        f'{THREAD} [data-testid="button"][data-label="Approve"]', timeout=TIMEOUT_MS
    )
    await page.wait_for_selector(bot_text(page, "needs an approval"), timeout=TIMEOUT_MS)
    assert await page.locator(f'{CARD}[data-status="pending"]').count() == 0
    await page.screenshot(path=screenshot_path("task-cards"))
    copy_to_docs("task-cards")

    await act_as(page, "UBOB")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').click()
    await page.wait_for_selector(bot_text(page, "Approved by"), timeout=TIMEOUT_MS)
    await page.wait_for_selector(bot_text(page, "Done"), timeout=TIMEOUT_MS)
    # After the approval the change runs as a card of its own stream, and completes.
    restart = page.locator(f'{CARD}[data-status="complete"]', has_text="restart")
    await restart.first.wait_for(timeout=TIMEOUT_MS)
    # Every step ends complete: the last card's final update may reach the page just after
    # the status message's ending (separate, paced edits), so wait for it rather than look once.
    await expect(page.locator(f'{CARD}[data-status="in_progress"]')).to_have_count(
        0, timeout=TIMEOUT_MS
    )
    assert await page.locator(f'{CARD}[data-status="error"]').count() == 0
    await page.screenshot(path=screenshot_path("task-cards-answer"))
