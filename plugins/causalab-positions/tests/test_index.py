"""Index positions: counting from the start and from the end, and what is out of range."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from causalab_core.plugins.contracts import RowText
from causalab_testing.conformance import PositionResolverConformance
from causalab_positions.index import OUT_OF_RANGE, IndexResolver


def row(n: int) -> RowText:
    return RowText("x" * n, tuple(range(100, 100 + n)), tuple((i, i + 1) for i in range(n)), {})


@given(length=st.integers(1, 40), index=st.integers(-50, 50))
def test_an_index_is_the_same_token_counted_from_either_end(length, index):
    got = IndexResolver().resolve(index, row(length))
    if -length <= index < length:
        assert got.positions == (index % length,) and got.reason is None
    else:
        assert got.positions == () and got.reason == OUT_OF_RANGE


def test_the_object_form_means_the_same():
    assert IndexResolver().resolve({"index": -2}, row(5)) == IndexResolver().resolve(-2, row(5))


def test_a_malformed_object_is_refused():
    with pytest.raises(ValueError, match="`index` must be an integer"):
        IndexResolver().check({"index": "last"})
    assert not IndexResolver().accepts({"index": 1, "scope": {}})
    assert not IndexResolver().accepts(True)


class TestConformance(PositionResolverConformance):
    @pytest.fixture
    def resolver(self):
        return IndexResolver()

    @pytest.fixture
    def specs(self):
        return [0, -1, 3, -7, {"index": 2}]

    @pytest.fixture
    def rows(self):
        return [row(n) for n in (1, 4, 7, 12)]
