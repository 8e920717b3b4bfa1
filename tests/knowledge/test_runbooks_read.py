"""Reading a runbook or one section: slugs as GitHub makes them, bounded, steps verbatim."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.knowledge.markdown import github_slug, parse_runbook
from bot.knowledge.runbooks import READ_BOUND, Runbooks, UnknownRunbook
from tests.knowledge.runbook_corpus import write_corpus


@pytest.fixture
def runbooks(tmp_path: Path) -> Runbooks:
    return Runbooks(write_corpus(tmp_path))


def test_a_section_comes_with_its_heading_and_the_runbook_title(runbooks: Runbooks) -> None:
    text = runbooks.read("linux/disk-full.md#free-space-on-var")
    assert text.startswith("Runbook: Disk full (linux/disk-full.md#free-space-on-var)\n\n")
    assert "## Free space on /var\n" in text
    # a section runs to the next heading of any level
    assert "Inodes exhausted" not in text


def test_numbered_steps_are_kept_verbatim(runbooks: Runbooks) -> None:
    text = runbooks.read("linux/disk-full.md#free-space-on-var")
    assert (
        "1. `df -h /var` to confirm the filesystem is full.\n"
        "2. `sudo du -xh /var --max-depth=2 | sort -h | tail -20` to find the biggest "
        "directories.\n"
        "3. Truncate, do not delete, a log a process still holds open: `truncate -s 0 FILE`.\n"
    ) in text


def test_a_hash_line_in_a_code_fence_is_not_a_heading(runbooks: Runbooks) -> None:
    text = runbooks.read("linux/disk-full.md#free-space-on-var")
    assert "# deleted files still held open keep their space\nlsof +L1" in text
    with pytest.raises(UnknownRunbook):
        runbooks.read("linux/disk-full.md#deleted-files-still-held-open-keep-their-space")


def test_a_path_alone_reads_the_whole_file_without_front_matter(runbooks: Runbooks) -> None:
    text = runbooks.read("k8s/crashloop.md")
    assert text.startswith("Runbook: Pod in CrashLoopBackOff (k8s/crashloop.md)\n\n# Pod in")
    assert "## Roll back" in text and "title:" not in text


def test_a_slug_may_be_given_as_heading_text(runbooks: Runbooks) -> None:
    by_slug = runbooks.read("k8s/crashloop.md#roll-back")
    assert runbooks.read("k8s/crashloop.md#Roll back") == by_slug
    assert runbooks.read("./k8s/crashloop.md#ROLL-BACK") == by_slug


def test_an_unknown_path_names_the_refs_nearby(runbooks: Runbooks) -> None:
    with pytest.raises(UnknownRunbook) as caught:
        runbooks.read("k8s/crashloops.md#roll-back")
    assert "k8s/crashloop.md#roll-back" in str(caught.value)
    with pytest.raises(UnknownRunbook) as caught:
        runbooks.read("linux/disk_full.md")
    assert "linux/disk-full.md" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_an_unknown_slug_lists_the_files_sections(runbooks: Runbooks) -> None:
    with pytest.raises(UnknownRunbook) as caught:
        runbooks.read("k8s/crashloop.md#rollback-now")
    message = str(caught.value)
    assert message.startswith("k8s/crashloop.md has no section #rollback-now; its sections:")
    assert "#roll-back" in message and "#read-the-logs-of-the-crashed-container" in message


def test_a_ref_far_from_everything_still_says_what_exists(runbooks: Runbooks) -> None:
    with pytest.raises(UnknownRunbook) as caught:
        runbooks.read("zzzz/qqqq.md")
    assert "runbooks include:" in str(caught.value)


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Free space on /var", "free-space-on-var"),
        ("What's up, Doc?", "whats-up-doc"),
        ("5xx errors (after a deploy!)", "5xx-errors-after-a-deploy"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
        ("Two  spaces", "two--spaces"),
        ("  Trimmed  ", "trimmed"),
        ("C++ & Rust: a/b", "c--rust-ab"),
        ("Ünïcödé Größe", "ünïcödé-größe"),
        ("emoji 🔥 fire", "emoji--fire"),
    ],
)
def test_slugs_are_githubs(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_duplicate_headings_get_numbered_slugs() -> None:
    parsed = parse_runbook(
        "# Steps\n\n## Check\n\na\n\n## Check\n\nb\n\n### Check\n\nc\n\n## Check-1\n\nd\n"
    )
    assert [s.slug for s in parsed.sections] == [
        "steps",
        "check",
        "check-1",
        "check-2",
        "check-1-1",
    ]


def test_inline_markup_in_a_heading_is_not_in_its_slug() -> None:
    parsed = parse_runbook("## Run `kubectl get pods` *now* — see [the docs](https://x.io)\n")
    assert parsed.sections[0].heading == "Run kubectl get pods now — see the docs"
    assert parsed.sections[0].slug == "run-kubectl-get-pods-now--see-the-docs"


def test_setext_headings_and_intro_text(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Before any heading.\n\nTitle\n=====\n\nBody.\n")
    runbooks = Runbooks(tmp_path)
    assert runbooks.read("a.md#title").endswith("Title\n=====\n\nBody.\n")
    assert runbooks.search("before any heading")[0].ref == "a.md"


def test_a_long_section_is_cut_at_a_line_with_a_note(tmp_path: Path) -> None:
    steps = "".join(
        f"{n}. Step number {n} of the long procedure, done by hand.\n" for n in range(1, 400)
    )
    (tmp_path / "long.md").write_text(f"# Long\n\n## Procedure\n\n{steps}")
    text = Runbooks(tmp_path).read("long.md#procedure")
    assert len(text) <= READ_BOUND
    body, note = text.rsplit("\n[cut here:", 1)
    assert note.startswith(f" the section is {len('## Procedure') + 2 + len(steps):,} characters")
    assert body.endswith(" done by hand.\n")  # whole lines only
    assert "1. Step number 1 of the long procedure, done by hand.\n" in body


def test_a_single_huge_line_is_still_bounded(tmp_path: Path) -> None:
    (tmp_path / "wide.md").write_text("# Wide\n\n" + "x" * 50_000 + "\n")
    assert len(Runbooks(tmp_path).read("wide.md")) <= READ_BOUND


def test_code_under_a_list_item_hides_its_hash_lines() -> None:
    parsed = parse_runbook(
        "# Steps\n\n1. Check the disk:\n\n   ```bash\n   # a comment\n   df -h\n   ```\n\n"
        "2. Then:\n\n       # indented code\n\n## Next\n"
    )
    assert [s.slug for s in parsed.sections] == ["steps", "next"]
    assert "   # a comment\n" in parsed.sections[0].text
