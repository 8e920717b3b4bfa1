"""Searching the runbooks: the right section first, whatever words people use."""

from __future__ import annotations

import pytest

from bot.knowledge.runbooks import SNIPPET_CHARS, Runbooks
from tests.knowledge.runbook_corpus import BROKEN, FILES, PHRASINGS, write_corpus


@pytest.fixture(scope="module")
def runbooks(tmp_path_factory: pytest.TempPathFactory) -> Runbooks:
    # Read only in this module: one folder and one index serve every test.
    return Runbooks(write_corpus(tmp_path_factory.mktemp("runbooks")))


def test_the_corpus_holds_thirty_files_one_broken(runbooks: Runbooks) -> None:
    summary = runbooks.summary()
    assert len(FILES) == 30
    assert summary.files == 29
    assert [path for path, _, _ in summary.skipped] == [BROKEN]
    assert summary.sections > 80


@pytest.mark.parametrize(("query", "expected"), PHRASINGS, ids=[q for q, _ in PHRASINGS])
def test_the_right_section_comes_first(runbooks: Runbooks, query: str, expected: str) -> None:
    hits = runbooks.search(query)
    assert hits, query
    assert hits[0].ref == expected, [h.ref for h in hits]


def test_at_least_ten_phrasings_are_checked() -> None:
    assert len(PHRASINGS) >= 10
    assert len({expected for _, expected in PHRASINGS}) >= 10


def test_a_hit_names_its_runbook_heading_and_a_short_snippet(runbooks: Runbooks) -> None:
    hit = runbooks.search("disk is full on /var", limit=1)[0]
    assert hit.path == "linux/disk-full.md"
    assert hit.title == "Disk full"
    assert hit.heading == "Free space on /var"
    assert "du -xh /var" in hit.snippet or "/var" in hit.snippet
    assert len(hit.snippet) <= SNIPPET_CHARS
    assert "\n" not in hit.snippet and "  " not in hit.snippet
    assert hit.score > 0


def test_an_alert_name_in_front_matter_finds_its_runbook(runbooks: Runbooks) -> None:
    assert runbooks.search("KubePodCrashLooping")[0].path == "k8s/crashloop.md"
    # the camel-case name split into words meets a plain query too
    assert runbooks.search("crash looping")[0].path == "k8s/crashloop.md"


def test_the_title_is_the_first_heading_without_front_matter(runbooks: Runbooks) -> None:
    hit = runbooks.search("page the secondary on-call")[0]
    assert hit.ref == "oncall/escalation.md#when-to-page-the-secondary"
    assert hit.title == "Escalation"


def test_limit_bounds_the_hits_and_results_are_ranked(runbooks: Runbooks) -> None:
    hits = runbooks.search("kubernetes pod", limit=3)
    assert len(hits) == 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert runbooks.search("kubernetes pod", limit=0) == []


def test_the_broken_file_is_never_found(runbooks: Runbooks) -> None:
    hits = runbooks.search("never indexed must not show up", limit=20)
    assert all(h.path != BROKEN for h in hits)


def test_nothing_matches_gives_no_hits(runbooks: Runbooks) -> None:
    assert runbooks.search("zyxxyqq") == []
    assert runbooks.search("   ") == []
    assert runbooks.search("?!*") == []


@pytest.mark.parametrize(
    "query",
    [
        'disk" OR body:*',
        "NEAR(disk full)",
        "disk AND NOT full",
        "title:disk",
        "-disk +full ^var",
        "(unbalanced",
        '"',
        "disk*",
    ],
)
def test_fts_syntax_in_a_query_is_only_words(runbooks: Runbooks, query: str) -> None:
    hits = runbooks.search(query)  # never an sqlite3.OperationalError
    assert all(hit.ref for hit in hits)


def test_stemming_finds_other_forms_of_a_word(runbooks: Runbooks) -> None:
    assert runbooks.search("restarted pods")[0].path == "k8s/crashloop.md"
    assert runbooks.search("certificates expired")[0].path == "tls/cert-expiry.md"
