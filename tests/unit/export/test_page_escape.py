"""The page's escape (export/page.esc) against its plain version: a text with nothing to escape is
returned as it is, anything else goes through html.escape, the bidi controls and the clip; the
same characters either way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.export.page import BIDI_CONTROLS, MAX_LABEL_CHARS, MAX_TEXT_CHARS, esc, esc_plain

#: Plain letters with every character either path treats apart, so most draws hit both paths.
TEXTS = st.text(alphabet=st.sampled_from(f"ab9 -_.:/{{}}&<>\"'…é{BIDI_CONTROLS}"), max_size=40) | st.text(max_size=40)
VALUES = TEXTS | st.integers() | st.floats() | st.none() | st.booleans()


class Named(str):
    """A str subclass whose str() is not its own characters."""

    def __str__(self) -> str:
        return "<named>"


@given(value=VALUES, limit=st.sampled_from((1, 2, 5, 20, MAX_LABEL_CHARS, MAX_TEXT_CHARS)))
def test_esc_gives_what_the_plain_escape_gives(value, limit):
    assert esc(value, limit) == esc_plain(value, limit)


@pytest.mark.parametrize(
    "value", ["llama-70b", "a&b", "<script>", 'say "hi"', "it's", "x\u202ey", "x" * (MAX_TEXT_CHARS + 1), Named("ok")]
)
def test_esc_of_each_kind_of_text_is_the_plain_escape(value):
    assert esc(value) == esc_plain(value)


def test_a_text_with_nothing_to_escape_is_returned_as_it_is():
    text = "llama-70b/1m keep 0.812"
    assert esc(text) is text
