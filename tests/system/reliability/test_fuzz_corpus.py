"""Every input kept in corpus/ (crashes found by bench/fuzz.py, and hand-made hostile cases) stays harmless."""

from __future__ import annotations

import pytest

from .fuzzcheck import CORPUS, check, seed_payloads, text_from_bytes

FILES = sorted(p for p in CORPUS.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix != ".md")


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_corpus_input_is_rejected_or_accepted_never_crashes(path):
    payloads = seed_payloads()
    text, good = text_from_bytes(path.read_bytes(), payloads)
    check(text, good)
