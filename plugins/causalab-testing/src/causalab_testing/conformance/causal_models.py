"""``CausalModelConformance``: what a causal model must do to generate interchange rows."""

from __future__ import annotations

import json

import pytest


from causalab_testing.conformance.common import must_override, assert_params_forbid_unknown_keys



def settings(model, n: int, seed: int = 0) -> list[dict]:
    """``n`` settings of ``model``'s inputs, each sampled with a ``random.Random`` seeded from ``seed``."""
    import random

    rng = random.Random(seed)
    return [{v: model.sample(rng, v) for v in model.inputs} for _ in range(n)]


def descendants(model, variable: str) -> set[str]:
    """The derived variables computed, directly or not, from ``variable``."""
    found: set[str] = set()
    for derived, parents in model.mechanisms.items():  # causal order: a parent is listed first
        if variable in parents or found & set(parents):
            found.add(derived)
    return found


class CausalModelConformance:
    """A causal model's contract (``causalab_core.plugins.contracts.CausalModel``): variables in causal order, sampling
    from the rng it is handed alone, each derived value a function of its parents, a prompt and an answer text
    for every setting, every setting in ``train`` or ``test`` (both reached) from its inputs alone, an
    intervention that changes only the variable and its descendants, columns that leave the row's own alone,
    and rows generated for both splits.

    Override ``causal_model`` (an instance); ``samples`` is how many settings each check draws.
    """

    samples = 200

    @pytest.fixture
    def causal_model(self):
        must_override("causal_model")

    def _settings(self, model, seed: int = 0) -> list[dict]:
        return settings(model, self.samples, seed)

    def _solved(self, model, inputs: dict) -> dict:
        from causalab_core.document.causal import solve

        try:
            return solve(model, inputs)
        except KeyError as exc:
            pytest.fail(f"causal model {model.name!r}: computing from the inputs {inputs!r} read {exc}, which is not "
                        "among the parents `mechanisms` lists for it: compute sees its parents alone", pytrace=False)

    def test_has_a_name_and_variables_in_causal_order(self, causal_model):
        m = causal_model
        assert isinstance(m.name, str) and m.name, "a causal model needs a `name`"
        assert m.inputs and all(isinstance(v, str) and v for v in m.inputs), f"{m.name!r}: `inputs` are no names"
        known = list(m.inputs)
        for derived, parents in m.mechanisms.items():
            if derived in known:
                pytest.fail(f"causal model {m.name!r}: {derived!r} is defined twice (an input, or two mechanisms)",
                            pytrace=False)
            late = [p for p in parents if p not in known]
            if late:
                pytest.fail(f"causal model {m.name!r}: parent {late[0]!r} of {derived!r} is not an input nor a "
                            "variable listed before it (`mechanisms` is in causal order)", pytrace=False)
            known.append(derived)

    def test_params_forbid_unknown_keys(self, causal_model):
        params = getattr(causal_model, "params", None)
        if params is not None and type(causal_model).Params.model_fields:
            assert_params_forbid_unknown_keys(f"causal model {causal_model.name!r}", type(causal_model).Params,
                                              params.model_dump(mode="json"))

    def test_columns_leave_the_rows_own_alone(self, causal_model):
        from causalab_core.document.causal import value_columns
        from causalab_core.errors import PluginError

        try:
            value_columns(causal_model)
        except PluginError as exc:
            pytest.fail(str(exc), pytrace=False)

    def test_a_domain_lists_every_value_sampling_gives(self, causal_model):
        """Where a model lists an input's values (``domain``, for ``rows: "all"``), they are distinct, in one
        fixed order, and hold every value ``sample`` draws: a population would otherwise miss rows."""
        for variable in causal_model.inputs:
            domain = causal_model.domain(variable)
            if domain is None:
                continue
            values = list(domain)
            assert values == list(causal_model.domain(variable)), f"{variable!r}: the domain's order changes"
            assert len({json.dumps(v, sort_keys=True, default=repr) for v in values}) == len(values), (
                f"causal model {causal_model.name!r}: the domain of {variable!r} repeats a value")
            drawn = {json.dumps(s[variable], sort_keys=True, default=repr) for s in self._settings(causal_model)}
            listed = {json.dumps(v, sort_keys=True, default=repr) for v in values}
            assert drawn <= listed, (f"causal model {causal_model.name!r}: sample draws {variable!r} values its "
                                     f"domain does not list: {sorted(drawn - listed)[:3]}")

    def test_sampling_follows_the_rng_it_is_handed_alone(self, causal_model):
        import random

        state = random.getstate()
        try:
            random.seed(1)
            first = self._settings(causal_model, seed=5)
            random.seed(2)
            again = self._settings(causal_model, seed=5)
        finally:
            random.setstate(state)
        if first != again:
            pytest.fail(f"causal model {causal_model.name!r}: two rngs seeded alike sampled different settings: "
                        "sample must draw from the rng it is handed, never from `random`'s global state",
                        pytrace=False)
        try:
            json.dumps(first)
        except (TypeError, ValueError) as exc:
            pytest.fail(f"causal model {causal_model.name!r}: a sampled value is not plain JSON ({exc}): rows are "
                        "written as data.jsonl", pytrace=False)

    def test_each_derived_value_is_a_function_of_its_parents(self, causal_model):
        m = causal_model
        for inputs in self._settings(m):
            values = self._solved(m, inputs)
            for derived, parents in m.mechanisms.items():
                again = m.compute(derived, {p: values[p] for p in parents})
                if again != values[derived]:
                    pytest.fail(f"causal model {m.name!r}: {derived!r} from the same parents gave {values[derived]!r} "
                                f"and then {again!r}: compute must be a function of its parents", pytrace=False)
            try:
                json.dumps({v: values[v] for v in m.mechanisms})
            except (TypeError, ValueError) as exc:
                pytest.fail(f"causal model {m.name!r}: a derived value is not plain JSON ({exc})", pytrace=False)

    def test_prompt_and_answer_are_texts(self, causal_model):
        m = causal_model
        for inputs in self._settings(m):
            values = self._solved(m, inputs)
            prompt, answer = m.prompt(values), m.answer(values)
            if not (isinstance(prompt, str) and prompt and isinstance(answer, str) and answer):
                pytest.fail(f"causal model {m.name!r}: prompt {prompt!r} and answer {answer!r} of {inputs!r}: each "
                            "must be a non-empty string", pytrace=False)

    def test_split_puts_every_setting_in_train_or_test_from_its_inputs(self, causal_model):
        m = causal_model
        seen = set()
        for inputs in self._settings(m):
            try:
                split = m.split(dict(inputs))
            except KeyError as exc:
                pytest.fail(f"causal model {m.name!r}: split read {exc}, which is not an input: it decides from the "
                            "inputs alone", pytrace=False)
            if split not in ("train", "test"):
                pytest.fail(f"causal model {m.name!r}: split of {inputs!r} is {split!r}, not 'train' or 'test'",
                            pytrace=False)
            if m.split(dict(inputs)) != split:
                pytest.fail(f"causal model {m.name!r}: split of {inputs!r} changed between two calls", pytrace=False)
            seen.add(split)
        if seen != {"train", "test"}:
            pytest.fail(f"causal model {m.name!r}: {self.samples} sampled settings all fell in {seen.pop()!r}: a "
                        "document asking for the other split gets no rows", pytrace=False)

    def test_an_intervention_changes_only_the_variable_and_its_descendants(self, causal_model):
        from causalab_core.document.causal import solve, variables

        m = causal_model
        drawn = self._settings(m)
        for base, source in zip(drawn, drawn[1:] + drawn[:1]):
            clean, other = self._solved(m, base), self._solved(m, source)
            for v in variables(m):
                got = solve(m, base, {v: other[v]})
                kept = [w for w in variables(m) if w != v and w not in descendants(m, v) and got[w] != clean[w]]
                if got[v] != other[v] or kept:
                    what = f"{kept[0]!r}, not a descendant," if kept else f"{v!r} itself did not take the value and"
                    pytest.fail(f"causal model {m.name!r}: setting {v!r} to {other[v]!r} on {base!r} changed "
                                f"{what} (an intervention changes only the variable and what is computed from it)",
                                pytrace=False)

    def test_generates_distinct_rows_for_each_split(self, causal_model):
        from causalab_core.document.causal import generate
        from causalab_core.document.schema import CausalModelSpec

        from causalab_core.errors import DocumentError

        m = causal_model
        for split in ("train", "test"):
            made = 0
            for v in m.inputs:  # a split may keep some input fixed: intervening on it leaves the split
                spec = CausalModelSpec(kind=m.name, intervene=[v], rows=4, split=split, seed=0)
                try:
                    rows = generate(m, spec, "$.data.causal_model")
                except DocumentError:
                    continue
                assert generate(m, spec, "$.data.causal_model") == rows, f"{m.name!r}: the same spec gave other rows"
                assert len({json.dumps(r, sort_keys=True) for r in rows}) == 4
                made += 1
            if not made:
                pytest.fail(f"causal model {m.name!r}: no intervention on one input gives 4 rows of split {split!r}",
                            pytrace=False)
