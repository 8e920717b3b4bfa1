"""What a runbooks folder must not do to the bot: huge files, symlinks out, broken text,
Slack mention syntax."""

from __future__ import annotations

import logging
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import bot.knowledge.runbooks as runbooks_module
from bot.knowledge.runbooks import MAX_FILE_BYTES, Runbooks


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def skipped(runbooks: Runbooks) -> dict[str, tuple[int | None, str]]:
    return {path: (line, reason) for path, line, reason in runbooks.summary().skipped}


def test_a_100_mb_file_is_skipped_without_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "ok.md", "# Fine\n\ntext\n")
    huge = tmp_path / "huge.md"
    with huge.open("wb") as handle:
        handle.truncate(100 * 1024 * 1024)  # sparse: nothing written
    opened: list[str] = []

    def spy(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return open(file, *args, **kwargs)

    monkeypatch.setattr(runbooks_module, "open", spy, raising=False)
    tracemalloc.start()
    try:
        runbooks = Runbooks(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert opened == [str(tmp_path / "ok.md")]
    assert peak < 5 * 1024 * 1024
    line, reason = skipped(runbooks)["huge.md"]
    assert line is None and f"{MAX_FILE_BYTES:,}-byte limit" in reason
    assert "huge.md" in caplog.text
    assert runbooks.summary().files == 1


def test_a_file_just_over_the_limit_is_skipped_one_at_it_is_kept(tmp_path: Path) -> None:
    write(tmp_path / "at.md", "# At\n" + "x" * (MAX_FILE_BYTES - 5))
    write(tmp_path / "over.md", "# Over\n" + "x" * MAX_FILE_BYTES)
    runbooks = Runbooks(tmp_path)
    assert list(skipped(runbooks)) == ["over.md"]
    assert runbooks.summary().files == 1


def test_symlinks_out_of_the_folder_are_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "runbooks", tmp_path / "secrets"
    write(outside / "passwords.md", "# Passwords\n\nhunter2\n")
    write(root / "real.md", "# Real\n\nthe real runbook\n")
    (root / "leak.md").symlink_to(outside / "passwords.md")
    (root / "leakdir").symlink_to(outside, target_is_directory=True)
    (root / "alias.md").symlink_to(root / "real.md")  # inside: fine
    runbooks = Runbooks(root)
    refused = skipped(runbooks)
    assert set(refused) == {"leak.md", "leakdir"}
    assert all("outside the runbooks folder" in reason for _, reason in refused.values())
    assert runbooks.search("hunter2 passwords") == []
    assert {h.path for h in runbooks.search("real runbook")} == {"real.md", "alias.md"}


def test_a_root_that_is_a_symlink_is_followed(tmp_path: Path) -> None:
    write(tmp_path / "checkout" / "a.md", "# Alpha\n\nalpha text\n")
    (tmp_path / "current").symlink_to(tmp_path / "checkout", target_is_directory=True)
    assert Runbooks(tmp_path / "current").search("alpha")[0].ref == "a.md#alpha"


def test_hidden_folders_and_other_files_are_ignored(tmp_path: Path) -> None:
    write(tmp_path / ".git" / "notes.md", "# Hidden\n\nsecret words\n")
    write(tmp_path / "notes.txt", "secret words\n")
    write(tmp_path / "deep" / "er" / "b.markdown", "# Deeper\n\nsecret words\n")
    runbooks = Runbooks(tmp_path)
    assert [h.ref for h in runbooks.search("secret words")] == ["deep/er/b.markdown#deeper"]


def test_undecodable_utf8_is_skipped_with_its_line(tmp_path: Path) -> None:
    write(tmp_path / "latin1.md", b"# Caf\n\nline two\n" + b"caf\xe9\n")
    write(tmp_path / "good.md", "# Good\n")
    runbooks = Runbooks(tmp_path)
    assert skipped(runbooks)["latin1.md"][0] == 4
    assert "not UTF-8" in skipped(runbooks)["latin1.md"][1]
    assert runbooks.summary().files == 1


@pytest.mark.parametrize(
    ("front_matter", "line", "reason"),
    [
        ("- a list\n- not a mapping\n", 2, "must be a mapping"),
        ("title: ok\nalerts: HostDown\n", 3, "alerts must be a list of strings"),
        ("title: [not, a, string]\n", 2, "title must be a string"),
        ("title: ok\n\ntags: [a, [b]]\n", 4, "tags must be a list of strings"),
        ("title: ok\nservices: {a: 1}\n", 3, "services must be a list"),
        ("title: 'unclosed\n", 3, "not valid YAML"),
        ("key: value\n  bad indent: x\n", 3, "not valid YAML"),
    ],
)
def test_broken_front_matter_is_skipped_naming_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, front_matter: str, line: int, reason: str
) -> None:
    caplog.set_level(logging.WARNING)
    write(tmp_path / "bad.md", f"---\n{front_matter}---\n# Bad\n")
    write(tmp_path / "good.md", "# Good\n")
    runbooks = Runbooks(tmp_path)
    found_line, found_reason = skipped(runbooks)["bad.md"]
    assert (found_line, reason in found_reason) == (line, True), found_reason
    assert f"bad.md, line {line}:" in caplog.text
    assert runbooks.summary().files == 1


def test_an_empty_front_matter_and_a_lone_rule_are_fine(tmp_path: Path) -> None:
    write(tmp_path / "empty.md", "---\n---\n# Empty\n\nbody\n")
    write(tmp_path / "rule.md", "---\n\n# Rule\n\nA thematic break opened this file.\n")
    runbooks = Runbooks(tmp_path)
    assert runbooks.summary().skipped == ()
    assert runbooks.search("thematic break")[0].ref == "rule.md#rule"


def test_at_most_max_files_are_indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runbooks_module, "MAX_FILES", 10)
    for n in range(13):
        write(tmp_path / f"f{n:02d}.md", f"# File {n}\n")
    runbooks = Runbooks(tmp_path)
    assert runbooks.summary().files == 10
    ((path, _, reason),) = runbooks.summary().skipped
    assert path == "f10.md" and "more than 10 runbook files" in reason


def test_slack_syntax_in_a_runbook_comes_back_as_data(tmp_path: Path) -> None:
    write(
        tmp_path / "ops" / "approvals.md",
        "---\ntitle: Deploy approvals <!here>\nalerts: [DeployBlocked]\n---\n"
        "# Approvals <@U0BOSS>\n\n"
        "This change was approved by U0BOSS. <@U0BOSS> says go; tell <!channel> and "
        "<!subteam^S0SRE|@sre>. Also <!everyone>, <!here|here>, <#C0OPS|ops>.\n",
    )
    runbooks = Runbooks(tmp_path, base_url="https://runbooks.example.com/")
    texts = [
        runbooks.read("ops/approvals.md"),
        runbooks.read("ops/approvals.md#approvals-u0boss"),
    ]
    for hit in runbooks.search("approved by U0BOSS"):
        texts += [hit.title, hit.heading, hit.snippet]
    alert = runbooks.for_alert("DeployBlocked")
    url = runbooks.for_url("https://runbooks.example.com/ops/approvals.html")
    assert alert is not None and url is not None
    texts += [alert.text, alert.title, url.text, url.title]
    for text in texts:
        assert "<@" not in text and "<!" not in text and "<#" not in text, text
    whole = runbooks.read("ops/approvals.md")
    assert "approved by U0BOSS. @U0BOSS says go; tell @channel and @sre." in whole
    assert "Also @everyone, @here, #ops." in whole
    assert "Runbook: Deploy approvals @here (ops/approvals.md)" in whole
