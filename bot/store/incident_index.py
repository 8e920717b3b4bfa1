"""The text side of the past-incident search, with no I/O: which terms a record is
indexed under, which terms a query asks for, and how BM25 ranks the postings the store
read (``bot.store.incidents`` does the reading and writing).

Terms are lowercased tokens of letters and digits; a token joined by ``-``, ``.`` or
``_`` (``web-03``, ``db-01.prod``, ``checkout_api``) is kept whole *and* as its parts,
so "web-03" finds ``web-03`` and "web" finds it too. A small English stop-word list
(without the words that mean something in operations: down, up, off, out), very long
tokens and long bare numbers (timestamps, ids) are left out. A record keeps
at most ``MAX_TERMS`` distinct terms: those of its alert, labels, tools and channel
first, then the most frequent.

Ranking is Okapi BM25 as Lucene computes it (k1 1.2, b 0.75, idf
``ln(1 + (N - df + 0.5) / (df + 0.5))``); equal scores rank the newer record (the
higher document number) first.
"""

from __future__ import annotations

import math
import re
import sys
from array import array
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress, repeat
from operator import add, and_, ge, mul, rshift, sub, truediv

K1 = 1.2
B = 0.75
MAX_TERMS = 64  # distinct terms indexed per record
MAX_QUERY_TERMS = 12  # distinct terms a query is searched by
MAX_QUERY_CHARS = 500
MAX_TERM_CHARS = 40  # a longer token is an id or a hash, not a word people search by
MAX_NUMBER_CHARS = 5  # "503", "8080" are searched for; "1700000000" is not

_TOKEN = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
_PARTS = re.compile(r"[._-]")

STOP_WORDS = frozenset(
    """a about after again all also am an and any are as at be been before being but by
    can could did do does doing during each few for from further had has have having he
    her here hers him his how i if in into is it its itself just me more most my no nor
    not now of on once only or other our ours own same she should so some such than that
    the their theirs them then there these they this those through to too under until
    very was we were what when where which while who whom why will with would you your
    yours""".split()
)


def _keep(token: str) -> bool:
    if len(token) < 2 or len(token) > MAX_TERM_CHARS or token in STOP_WORDS:
        return False
    return not (token.isdigit() and len(token) > MAX_NUMBER_CHARS)


def tokens(text: str) -> list[str]:
    """The terms of ``text`` in order, repeats included (a compound then its parts)."""
    out: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        token = match.group()
        if _keep(token):
            out.append(token)
        if _PARTS.search(token):
            out.extend(part for part in _PARTS.split(token) if _keep(part))
    return out


@dataclass(frozen=True, slots=True)
class DocTerms:
    """What a record is indexed under: each kept term's frequency, and the length of
    the document (every token counted, kept or not, as BM25 wants)."""

    tf: dict[str, int]
    length: int


def doc_terms(fields: Iterable[str], text: Iterable[str], *, cap: int = MAX_TERMS) -> DocTerms:
    """The terms of a record: ``fields`` (alert name, label values, tools, channel) are
    kept first, then the terms of ``text`` by frequency (the earlier first on a tie)."""
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    priority: set[str] = set()
    position = 0
    for is_field, part in [(True, f) for f in fields] + [(False, t) for t in text]:
        for term in tokens(part):
            counts[term] += 1
            first.setdefault(term, position)
            position += 1
            if is_field:
                priority.add(term)
    ranked = sorted(counts, key=lambda t: (t not in priority, -counts[t], first[t]))
    return DocTerms({t: counts[t] for t in ranked[:cap]}, sum(counts.values()))


@dataclass(frozen=True, slots=True)
class Query:
    """The distinct terms a query is searched by (its first ``MAX_QUERY_TERMS``), and
    for each term that is only a part of a compound the query names, that compound."""

    terms: list[str]
    part_of: dict[str, str]

    def ranked(self, postings: dict[str, str]) -> list[str]:
        """The postings BM25 ranks by: a part of a compound only when no record holds
        the whole ("web-03" asks for that host, not for every ``web`` and ``03``)."""
        return [
            postings[term]
            for term in self.terms
            if not (term in self.part_of and postings.get(self.part_of[term]))
        ]


def query_terms(query: str) -> Query:
    """The terms of ``query``; see ``Query``."""
    seen: dict[str, None] = {}
    part_of: dict[str, str] = {}
    standalone: set[str] = set()
    for match in _TOKEN.finditer(query[:MAX_QUERY_CHARS].lower()):
        token = match.group()
        found = [token] if _keep(token) else []
        parts = [p for p in _PARTS.split(token) if _keep(p)] if _PARTS.search(token) else []
        if found:
            standalone.add(token)
            for part in parts:
                part_of.setdefault(part, token)
        else:
            standalone.update(parts)
        for term in found + parts:
            if len(seen) < MAX_QUERY_TERMS:
                seen.setdefault(term, None)
    terms = list(seen)
    return Query(terms, {p: c for p, c in part_of.items() if p not in standalone and p in seen})


def idf(n_docs: int, df: int) -> float:
    """Robertson–Spärck Jones with +1 inside the log (never negative), as Lucene."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


# -- lengths as one byte, as Lucene keeps its norms ----------------------------------------
EXACT_BELOW = 128  # lengths under this are kept exactly; longer ones 2% apart
_STEP = math.log(1.02)


def length_byte(length: int) -> int:
    """A document length as one byte (1..255; 0 marks a removed record)."""
    if length < EXACT_BELOW:
        return max(1, length)
    return min(255, EXACT_BELOW + round(math.log(length / EXACT_BELOW) / _STEP))


LENGTH_OF_BYTE = [0.0] + [
    float(q) if q < EXACT_BELOW else EXACT_BELOW * math.exp((q - EXACT_BELOW) * _STEP)
    for q in range(1, 256)
]


# -- ranking -------------------------------------------------------------------------------
_LITTLE = sys.byteorder == "little"


def posting(tf: int) -> str:
    """A term frequency as the 2 hex digits that end a posting (capped at 255)."""
    return f"{max(1, min(tf, 255)):02x}"


def _docs_and_tfs(packed: str, lo: int) -> array[int]:
    """A term's postings (8 hex digits each: the document in 6, its tf in 2, in
    document order) as 32-bit values ``doc << 8 | tf``, those below ``lo`` left out."""
    values = array("I", bytes.fromhex(packed))
    if _LITTLE:
        values.byteswap()
    start = bisect_left(values, lo << 8)
    return values[start:] if start else values


def _floor(acc: list[float], top: int) -> float:
    """The ``top``-th best score so far (0 while fewer records scored)."""
    scored = list(filter(None, acc))
    return sorted(scored)[-top] if len(scored) >= top else 0.0


def bm25(
    packed: Iterable[str], lens: str, *, lo: int, n_docs: int, avg_length: float, top: int
) -> list[tuple[int, float]]:
    """The ``top`` best (document, score) for a query's terms, best first, the newer
    first on a tie. ``packed``: each term's postings; ``lens``: one length byte per
    record from ``lo`` on (2 hex digits; ``00``: removed, so it scores nothing).

    Written with ``map`` over C functions rather than a loop: a search may read
    thousands of postings, and a Python loop costs about a microsecond for each. Terms
    are added rarest first; once the terms left could not lift a record that has not
    scored yet above the ``top``-th best (each adds less than its weight), they only
    add to the records that have (MaxScore): the same ``top``, in less time."""
    avg = avg_length if avg_length > 0 else 1.0
    n_docs = max(n_docs, 1)
    length_bytes = bytes.fromhex(lens)
    norm = [K1 * (1 - B + B * length / avg) if length else math.inf for length in LENGTH_OF_BYTE]
    acc = [0.0] * len(length_bytes)
    lists = []
    for one in packed:
        values = _docs_and_tfs(one, lo)
        if values:
            lists.append((idf(max(n_docs, len(values)), len(values)) * (K1 + 1), values))
    lists.sort(key=lambda item: -item[0])
    left = sum(weight for weight, _ in lists)  # what the terms not yet added could add
    only_scored = False
    for weight, values in lists:
        rel = list(map(sub, map(rshift, values, repeat(8)), repeat(lo)))
        if rel[-1] >= len(acc):  # written after ``lens`` was read: not counted yet
            rel = rel[: bisect_left(rel, len(acc))]
            values = values[: len(rel)]
        if only_scored:
            scored = list(map(acc.__getitem__, rel))
            values = array("I", compress(values, scored))
            rel = list(compress(rel, scored))
        tfs = list(map(and_, values, repeat(255)))
        norms = map(norm.__getitem__, map(length_bytes.__getitem__, rel))
        gains = map(truediv, map(mul, tfs, repeat(weight)), map(add, tfs, norms))
        deque(map(acc.__setitem__, rel, map(add, map(acc.__getitem__, rel), gains)), maxlen=0)
        left -= weight
        if not only_scored and left > 0 and left < max(acc) and left < _floor(acc, top):
            only_scored = True
    docs = list(compress(range(len(acc)), acc))  # those that scored
    scores = list(map(acc.__getitem__, docs))
    if len(scores) > top:  # only what reaches the top is sorted with its document
        floor = sorted(scores)[-top]
        docs = list(compress(docs, map(ge, scores, repeat(floor))))
        scores = list(map(acc.__getitem__, docs))
    ranked = sorted(zip(scores, docs, strict=True), reverse=True)[:top]
    return [(rel + lo, score) for score, rel in ranked if score > 0]
