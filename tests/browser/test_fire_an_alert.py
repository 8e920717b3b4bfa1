"""The `opsloop dev` page in headless Chromium: "Fire an alert" has the dev server send the
bot Alertmanager's notification; the bot posts the alert in the channel, its thread opens,
and the investigation the alert started answers there — nobody typed anything. The
screenshot of that thread is docs/alerts.md's."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Dev, copy_to_docs, screenshot_path
from .test_dev_page import THREAD, TIMEOUT_MS, bot_text, open_page

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the module's browser and stack

ALERT = '[data-testid="channel-messages"] [data-testid="message"].bot:has-text("WebLatencyHigh")'
SCREENSHOT = "alerts/alert-thread"


async def test_a_fired_alert_is_posted_and_investigated_in_its_thread(
    browser: Any, dev: Dev
) -> None:
    page = await open_page(browser, dev, "UALICE")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    await page.click('[data-testid="fire-alert"]')
    alert = page.locator(ALERT).first
    await alert.wait_for(timeout=TIMEOUT_MS)
    assert "Firing" in await alert.inner_text()

    # Its thread opens by itself; the investigation answers there, changing nothing.
    await page.wait_for_selector(f"{THREAD}:not([hidden])", timeout=TIMEOUT_MS)
    answer = page.locator(bot_text(page, "WebLatencyHigh: confirmed"))
    await answer.wait_for(timeout=TIMEOUT_MS)
    text = await answer.inner_text()
    assert "Likely cause" in text and "I changed nothing" in text
    await page.wait_for_selector(bot_text(page, "Done"), timeout=TIMEOUT_MS)
    assert await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').count() == 0
    assert await page.locator('[data-testid="notice"].warn').count() == 0
    assert errors == []

    # The docs' picture: the alert and its thread, without the first visit's hint and the
    # notice that said the alert was sent.
    await page.click('[data-testid="dismiss-hint"]')
    await page.evaluate("document.querySelectorAll('.notice').forEach(n => n.remove())")
    await page.screenshot(path=screenshot_path(SCREENSHOT))
    copy_to_docs(SCREENSHOT)
