"""What switches OpenTelemetry tracing on: ``OTEL_TRACES_EXPORTER=otlp``, or an OTLP
endpoint with no other exporter named; ``none`` and ``OTEL_SDK_DISABLED`` turn it off."""

from __future__ import annotations

import os

import pytest

from bot.settings import load_otel_settings

ENDPOINT = "http://collector:4318"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "opsloop"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "console"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_what_switches_tracing_on(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], enabled: bool
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert load_otel_settings().enabled is enabled


def test_contents_are_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_otel_settings().capture_content is False
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    assert load_otel_settings().capture_content is True
