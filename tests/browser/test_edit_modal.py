"""Approve with edits on the dev page, in headless Chromium on ``opsloop dev``.

alice asks; the restart card waits with ``Edit``; bob presses it and the page shows the
modal the bot opened (``views.open``), prefilled with the call's argument; a value the
tool refuses comes back as an error under its input (``response_action: errors``) and the
dialog stays; a good value closes it, the card says "Approved with edits by @bob" with
the edited argument, and the restart runs. The docs' ``edit-modal`` screenshot is taken
here.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import expect

from .conftest import Dev, copy_to_docs, screenshot_path
from .test_dev_page import THREAD, TIMEOUT_MS, act_as, bot_text, mention, open_page

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the module's browser and stack

CARD = f'{THREAD} [data-testid="message"].bot:has([data-testid="button"][data-label="Edit"])'
WAIT_INPUT = '#modal [data-block-id="arg:wait_s"] input'


async def test_an_approver_edits_the_restart_before_approving_it(browser: Any, dev: Dev) -> None:
    page = await open_page(browser, dev, "UALICE")
    await mention(page, "@opsloop web is slow, look into it")
    card = page.locator(CARD)
    await card.wait_for(timeout=TIMEOUT_MS)
    assert "wait_s" in await card.inner_text()

    await act_as(page, "UBOB")
    await page.locator(f'{CARD} [data-testid="button"][data-label="Edit"]').click()
    modal = page.locator("#modal")
    await expect(modal).to_be_visible(timeout=TIMEOUT_MS)
    assert "Edit before approving" in await page.inner_text("#modal-title")
    await expect(page.locator(WAIT_INPUT)).to_have_value("15")

    # A value outside the tool's bounds: the bot's errors, under the input; nothing decided.
    await page.fill(WAIT_INPUT, "0")
    await page.click("#modal-submit")
    error = page.locator("#modal .modal-error")
    await expect(error).to_be_visible(timeout=TIMEOUT_MS)
    assert "1" in await error.inner_text()
    await expect(modal).to_be_visible()
    await page.fill(WAIT_INPUT, "20")
    await page.screenshot(path=screenshot_path("edit-modal"))

    await page.click("#modal-submit")
    await expect(modal).to_be_hidden(timeout=TIMEOUT_MS)
    await page.wait_for_selector(bot_text(page, "Approved with edits by"), timeout=TIMEOUT_MS)
    decided = page.locator(f'{THREAD} [data-testid="message"].bot', has_text="Approved with edits")
    text = await decided.first.inner_text()
    assert "@bob" in text and "wait_s 15 → 20" in text
    assert await page.locator(f'{THREAD} [data-testid="button"][data-label="Edit"]').count() == 0
    await decided.first.screenshot(path=screenshot_path("edit-approved"))
    await page.wait_for_selector(bot_text(page, "web is healthy again"), timeout=TIMEOUT_MS)
    copy_to_docs("edit-modal")
    copy_to_docs("edit-approved")
