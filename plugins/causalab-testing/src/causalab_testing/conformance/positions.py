"""``PositionResolverConformance``: what a position resolver must do with the specs it owns."""

from __future__ import annotations


import pytest

from causalab_core.plugins.contracts import RowText

from causalab_testing.conformance.common import UNKNOWN_KEY, must_override



UNOWNED_SPECS = (None, True, False, 1.5, [], [0, 1], {}, {UNKNOWN_KEY: 1})
"""Forms no resolver should take."""

KNOWN_SPECS = (0, 3, -1, -7, {"index": 2}, {"index": -1, "scope": {"variable": "day"}}, {"variable": "day"},
               {"variable": "day", "segment": "user[0]"}, "last", "first")
"""Forms some resolver may own: each is foreign to a resolver when another installed resolver accepts it."""


class PositionResolverConformance:
    """A resolver's windows are in range and deterministic; a failure has a reason and no positions;
    it refuses forms it does not own (another installed resolver's, and forms nobody owns).

    Override ``resolver``, ``specs`` and ``rows``; ``foreign_specs`` defaults to :data:`UNOWNED_SPECS` plus each
    of :data:`KNOWN_SPECS` that another resolver of the installed registry accepts.
    """

    @pytest.fixture
    def resolver(self):
        must_override("resolver")

    @pytest.fixture
    def specs(self):
        """Position specs the resolver accepts (include some that fail on some rows)."""
        must_override("specs")

    @pytest.fixture
    def rows(self) -> list[RowText]:
        must_override("rows")

    @pytest.fixture
    def foreign_specs(self, resolver):
        """Specs the resolver must refuse (``accepts`` is False)."""
        return self.foreign_specs_for(resolver)

    @staticmethod
    def foreign_specs_for(resolver) -> list:
        """:data:`UNOWNED_SPECS`, and each of :data:`KNOWN_SPECS` another installed resolver accepts."""
        from causalab_core.plugins.registry import registry

        others = [cls() for name, cls in registry().components("position").items() if name != resolver.name]
        return [*UNOWNED_SPECS, *(s for s in KNOWN_SPECS if any(_accepts(o, s) for o in others))]

    def test_accepts_its_own_specs(self, resolver, specs):
        for spec in specs:
            assert resolver.accepts(spec), f"resolver {resolver.name!r} does not accept its own spec {spec!r}"
            resolver.check(spec)

    def test_refuses_forms_it_does_not_own(self, resolver, specs, foreign_specs):
        own = lambda s: any(type(s) is type(t) and s == t for t in specs)  # noqa: E731 - True == 1, but not here
        taken = [s for s in foreign_specs if not own(s) and _accepts(resolver, s)]
        if taken:
            pytest.fail(f"resolver {resolver.name!r} accepts {', '.join(map(repr, taken))}, forms it does not own "
                        "(another resolver's, or nobody's): a position form has exactly one resolver", pytrace=False)

    def test_windows_are_in_range_or_a_reason_is_given(self, resolver, specs, rows):
        for spec in specs:
            for row in rows:
                got = resolver.resolve(spec, row)
                if got.reason is None:
                    assert got.positions and all(0 <= p < len(row.ids) for p in got.positions)
                else:
                    assert got.positions == () and isinstance(got.reason, str)

    def test_is_deterministic(self, resolver, specs, rows):
        for spec in specs:
            assert [resolver.resolve(spec, r) for r in rows] == [resolver.resolve(spec, r) for r in rows]


def _accepts(resolver, spec) -> bool:
    try:
        return bool(resolver.accepts(spec))
    except Exception as exc:  # noqa: BLE001 - a resolver must answer False, not raise, for a form it does not own
        pytest.fail(f"resolver {resolver.name!r}: accepts({spec!r}) raised {type(exc).__name__}: {exc}; "
                    "it must answer False for a form it does not own", pytrace=False)
