"""Every tools.yml configuration error names the file, the tool and the line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bot.errors import ConfigError
from tools.spec import CommandToolSpec, HttpToolSpec, load_tools_file

GOOD = """\
tools:
  - name: restart_service
    description: Restart a systemd service on a host.
    category: mutating
    timeout: 30
    params:
      host:    {type: string, enum: [web-01, web-02, web-03], description: Host name}
      service: {type: string, pattern: "^[a-z0-9@._-]+$", description: Unit name}
    run: ["ssh", "{host}", "sudo", "systemctl", "restart", "{service}"]
  - name: http_check
    kind: http
    description: Check a URL.
    category: read_only
    parallel: true
    params:
      url: {type: string, pattern: "^https?://", description: The URL}
    request: {method: GET, url: "{url}"}
channels:
  C0123: [http_check]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tools.yml"
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_tools_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:"), message
    return message.removeprefix(f"{path}:")


def test_the_design_example_loads(tmp_path: Path) -> None:
    parsed = load_tools_file(write(tmp_path, GOOD))
    restart, check = parsed.tools
    assert isinstance(restart, CommandToolSpec) and restart.category == "mutating"
    assert isinstance(check, HttpToolSpec) and check.parallel
    assert parsed.channels == {"C0123": ["http_check"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace("    timeout: 30\n", "    timeout: 30\n    retries: 3\n"),
            "6: tool 'restart_service': retries: unknown key",
        ),
        (
            GOOD.replace('"{service}"]', '"{unit}"]'),
            "9: tool 'restart_service': run: template names missing parameter {unit}",
        ),
        (
            GOOD.replace('pattern: "^[a-z0-9@._-]+$"', 'pattern: "([a-"'),
            "8: tool 'restart_service': params.service: bad pattern",
        ),
        (
            GOOD.replace("name: http_check", "name: restart_service"),
            "10: tool 'restart_service': duplicate name",
        ),
        (
            GOOD.replace("category: read_only", "category: dangerous"),
            "13: tool 'http_check': category:",
        ),
        (
            GOOD.replace("name: http_check", "name: http check"),
            "10: tool 'http check':",
        ),
        (
            GOOD.replace("    description: Check a URL.\n", ""),
            "10: tool 'http_check': description: Field required",
        ),
        (
            GOOD.replace("[http_check]", "[http check]"),
            "19: channels.C0123: bad name",
        ),
    ],
)
def test_errors_name_file_tool_and_line(tmp_path: Path, text: str, expected: str) -> None:
    message = error_of(tmp_path, text)
    assert message.startswith(expected), message


def test_missing_parameter_in_a_template_is_named(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace('"{service}"]', '"{unit}"]'))
    assert "missing parameter {unit}" in message


def test_reserved_template_variables_need_no_parameter(tmp_path: Path) -> None:
    text = GOOD.replace('"{service}"]', '"{service}", "--by", "{confirmed_by}"]')
    assert load_tools_file(write(tmp_path, text)).tools[0].name == "restart_service"


def test_yaml_syntax_errors_have_a_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, "tools:\n  - name: [unclosed\n")
    assert "not valid YAML" in message and message.split(":")[0].isdigit()


def test_an_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_tools_file(tmp_path / "missing.yml")


def test_an_empty_file_has_no_tools(tmp_path: Path) -> None:
    assert load_tools_file(write(tmp_path, "")).tools == []
