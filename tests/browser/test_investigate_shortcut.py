"""The `opsloop dev` page in headless Chromium: Alertmanager's alert is posted in the channel
(it starts nothing), someone uses "⋯ → Investigate with opsloop" on it, and a job starts in
the alert's thread — requested by them — which works the incident through to its answer,
whose feedback buttons can be pressed."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Dev, screenshot_path
from .test_dev_page import THREAD, TIMEOUT_MS, act_as, bot_text, open_page

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the module's browser and stack

ALERT = '[data-testid="channel-messages"] [data-testid="message"]:has-text("HighCPU web")'


async def test_the_shortcut_on_an_alert_post_starts_a_job_in_its_thread(
    browser: Any, dev: Dev
) -> None:
    page = await open_page(browser, dev, "UALICE")
    notices: list[str] = []
    page.on("console", lambda m: notices.append(m.text) if m.type == "error" else None)

    await page.click('[data-testid="post-alert"]')
    alert = page.locator(ALERT).first
    await alert.wait_for(timeout=TIMEOUT_MS)
    await page.wait_for_timeout(500)
    assert await page.locator(f"{THREAD}:not([hidden])").count() == 0  # nothing started

    await alert.hover()
    await alert.locator('[data-testid="message-menu-toggle"]').click()
    await alert.locator('[data-testid="shortcut-investigate"]').click()

    # The alert's thread opens and the job works there: status, then the approval card.
    await page.wait_for_selector(f"{THREAD}:not([hidden])", timeout=TIMEOUT_MS)
    await page.locator(f'{THREAD} [data-testid="message"].bot').first.wait_for(timeout=TIMEOUT_MS)
    await page.wait_for_selector(
        f'{ALERT} [data-testid="reaction"][data-name="eyes"]', timeout=TIMEOUT_MS
    )
    approve = page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]')
    await approve.wait_for(timeout=TIMEOUT_MS)
    await page.screenshot(path=screenshot_path("investigate-shortcut"))

    # The requester may not approve their own job's restart (two-person rule): an approver does.
    await act_as(page, "UBOB")
    await page.locator(f'{THREAD} [data-testid="button"][data-label="Approve"]').click()
    await page.wait_for_selector(bot_text(page, "Approved by"), timeout=TIMEOUT_MS)

    # The answer carries the feedback buttons; pressing one marks it and raises no error.
    helpful = page.locator(f'{THREAD} [data-testid="feedback"] [data-feedback="positive"]')
    await helpful.first.wait_for(timeout=60_000)
    await helpful.first.click()
    await page.wait_for_selector(
        f'{THREAD} [data-feedback="positive"].chosen[aria-pressed="true"]', timeout=TIMEOUT_MS
    )
    await page.screenshot(path=screenshot_path("feedback-buttons"))
    assert await page.locator('[data-testid="notice"]:has-text("refused")').count() == 0
    assert notices == []
