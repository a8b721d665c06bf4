"""Text normalisation and the one tokenizer behind BM25 and the lexical embeddings.

``tokenize(text)`` returns search terms for English and Chinese alike:

- Latin-script words are NFKC-normalised, lower-cased, stripped of English stop words and
  stemmed with the Snowball English stemmer (PyStemmer): "configuring" and "configuration"
  meet at "configur". Identifiers joined by ``_``, ``-`` or ``.`` (``SANDBOX_MEMORY_MB``,
  ``search_docs``) give their parts and the whole identifier, so both a natural question and
  an exact name find them.
- Runs of CJK characters become overlapping character bigrams (a lone character stays a
  unigram), the usual dictionary-free way to index Chinese: "配置沙箱" gives "配置", "置沙",
  "沙箱". A few very common Chinese function words are dropped.
"""

from __future__ import annotations

import re
import threading
import unicodedata

import Stemmer

__all__ = ["normalize_whitespace", "stem_words", "tokenize"]

_WHITESPACE_RE = re.compile(r"\s+")
# A CJK run (Han ideographs, kana, hangul) or a Latin/digit word that may contain the joiners
# _ - . between its parts.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN_RE = re.compile(
    rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W_{_CJK}]+(?:[_.\-][^\W_{_CJK}]+)*)",
)
_JOINER_RE = re.compile(r"[_.\-]")

# A word list reads better as words than as 130 quoted strings.
ENGLISH_STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    """.split()  # noqa: SIM905
)
# Bigrams of question words and particles that say nothing about the topic.
CHINESE_STOP_BIGRAMS = frozenset(
    "如何 怎么 怎样 什么 哪些 哪个 是否 可以 我们 你们 一个 这个 那个 需要 应该 能否 为什么".split()  # noqa: SIM905
)

_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    # A Stemmer object keeps a cache and must not be shared between threads.
    stemmer: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english")
        _local.stemmer = stemmer
    return stemmer


def normalize_whitespace(text: str) -> str:
    """``text`` with every run of whitespace turned into one space, stripped."""
    return _WHITESPACE_RE.sub(" ", text).strip()


def stem_words(words: list[str]) -> list[str]:
    """The Snowball English stems of lower-case ``words``, in order."""
    return list(_stemmer().stemWords(words))


def tokenize(text: str) -> list[str]:
    """The search terms of ``text`` in reading order (see the module docstring). Deterministic;
    empty for text with no letters or digits."""
    normalized = unicodedata.normalize("NFKC", text).lower()
    terms: list[str] = []
    words: list[str] = []
    slots: list[int] = []  # where each word's stem goes in terms
    for cjk, word in _TOKEN_RE.findall(normalized):
        if cjk:
            terms.extend(_bigrams(cjk))
            continue
        if "_" in word or "." in word or "-" in word:
            # The whole identifier as one exact term, plus its stemmed parts.
            terms.append(word)
            parts = [part for part in _JOINER_RE.split(word) if part]
        else:
            parts = [word]
        for part in parts:
            if part not in ENGLISH_STOP_WORDS:
                slots.append(len(terms))
                terms.append(part)
                words.append(part)
    for slot, stem in zip(slots, stem_words(words), strict=True):
        terms[slot] = stem
    return terms


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    grams = (run[i : i + 2] for i in range(len(run) - 1))
    return [gram for gram in grams if gram not in CHINESE_STOP_BIGRAMS]
