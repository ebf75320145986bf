"""``EngineConformance``: an engine runs a plan as the independent reference does."""

from __future__ import annotations


import pytest
import torch
from safetensors.torch import save_file


from causalab_testing.conformance.common import must_override, assert_params_forbid_unknown_keys
from causalab_testing.conformance.kit import model_width, intervention_document, kit_registry
from causalab_testing.conformance.reference import independent_forward, ragged_rows



class EngineConformance:
    """An engine runs every step, returns flat tensors, agrees with an independent forward and with the
    reference engine, and refuses options it does not know.

    Override ``engine``. Every engine is checked against :func:`independent_forward` (each row alone through a
    plain ``transformers`` forward, patched by hooks written in this kit) to ``independent_tolerance``; and,
    unless it is the reference itself, against ``reference`` (the ``hooks`` engine by default, itself checked
    bit for bit against pyvene in causalab's own tests) to ``tolerance``. Needs the fixtures of
    :mod:`causalab_testing.fixtures`.
    """

    #: how close scores must be to the reference engine's (0 means bit-identical).
    tolerance = 0.0
    #: how close scores must be to the independent forward's (unpadded rows: the last bits may differ).
    independent_tolerance = 1e-4

    @pytest.fixture
    def engine(self):
        must_override("engine")

    @pytest.fixture
    def reference(self, engine):
        """The engine whose numbers this one must match to ``tolerance``; None where ``engine`` is that engine."""
        return self.reference_for(engine)

    @staticmethod
    def reference_for(engine):
        """The ``hooks`` engine, or None for the hooks engine itself (an engine is not its own reference)."""
        from causalab_core.plugins.registry import registry

        hooks = registry().get("engine", "hooks")
        return None if isinstance(engine, hooks) else hooks()

    @pytest.fixture(params=["tiny_llama", "tiny_gpt2"])
    def ragged_plan(self, request, write_doc):
        from causalab_core import api
        from causalab_testing.data import sweep_document

        model = request.getfixturevalue(request.param)
        return api.plan(write_doc(sweep_document(str(model), layers=[0, 2], positions=[-4, -1]), ragged_rows()))

    def assert_same(self, got, expected):
        assert set(got) == set(expected)
        for path in expected:
            assert set(got[path]) == set(expected[path]), path
            for name, tensor in expected[path].items():
                torch.testing.assert_close(got[path][name], tensor, rtol=0, atol=self.tolerance, msg=path)

    def test_returns_a_flat_dict_of_tensors_keyed_by_step_path(self, engine, ragged_plan):
        got = engine.execute(ragged_plan)
        assert set(got) == {s.path for s in ragged_plan.steps()}
        for path, named in got.items():
            assert all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in named.items()), path

    def assert_independent(self, engine, got, expected) -> None:
        """``got`` (an engine's results) holds ``expected`` (the independent forward's) to ``independent_tolerance``."""
        for path, named in expected.items():
            assert path in got, f"engine {engine.name!r} returned nothing for scored step {path!r}"
            for name, tensor in named.items():
                assert name in got[path], f"engine {engine.name!r} returned no {name!r} for step {path!r}"
                atol = 0 if not tensor.is_floating_point() else self.independent_tolerance
                torch.testing.assert_close(got[path][name].to(tensor.dtype), tensor, rtol=0, atol=atol,
                                           msg=lambda m, path=path, name=name: f"{path} {name}: {m}")

    def test_scores_match_an_independent_forward(self, engine, ragged_plan):
        """Padded batches give each row's numbers from a plain forward of that row alone, patched by hand."""
        self.assert_independent(engine, engine.execute(ragged_plan, batch_size=4), independent_forward(ragged_plan))

    @pytest.fixture(params=["tiny_llama", "tiny_gpt2"])
    def intervention_plan(self, request, write_doc):
        return self.interventions_of(request.getfixturevalue(request.param), write_doc)

    @staticmethod
    def interventions_of(model, write_doc):
        """:func:`intervention_document` on 8 ragged rows of ``model``, planned with the kit's kinds:
        ``(plan, classes)``, the classes an engine is handed (``api.featurizer_classes``)."""
        from causalab_core import api

        path = write_doc(intervention_document(str(model)), ragged_rows(8))
        width = model_width(model)
        save_file({"vector": torch.randn(width, generator=torch.Generator().manual_seed(5))},
                  str(path.parent / "steer.safetensors"))
        plugins = kit_registry()
        plan = api.plan(path, registry=plugins)
        return plan, api.featurizer_classes(plan, plugins)

    def test_interventions_match_an_independent_forward(self, engine, intervention_plan):
        """Zero, mean, noise in units of another input's spread, a difference of means and a vector added, a
        swap from a noised run's read, and a custom ``apply``, on padded batches: each row's numbers are those
        of the kit's own per-row forward, which computes every need and combination from their definitions."""
        plan, classes = intervention_plan
        self.assert_independent(engine, engine.execute(plan, featurizers=classes, batch_size=4),
                                independent_forward(plan, featurizers=classes))

    def test_interventions_match_the_reference_engine(self, engine, reference, intervention_plan):
        if reference is None:
            pytest.skip("the engine is the reference engine (it is checked against the independent forward)")
        plan, classes = intervention_plan
        self.assert_same(engine.execute(plan, featurizers=classes, batch_size=4),
                         reference.execute(plan, featurizers=classes, batch_size=4))

    def test_scores_match_the_reference_engine_on_padded_batches(self, engine, reference, ragged_plan):
        if reference is None:
            pytest.skip("the engine is the reference engine (it is checked against the independent forward)")
        self.assert_same(engine.execute(ragged_plan, batch_size=4), reference.execute(ragged_plan, batch_size=4))

    def test_options_forbid_unknown_keys(self, engine):
        assert_params_forbid_unknown_keys(f"engine {engine.name!r}", type(engine).Options,
                                          engine.options.model_dump(mode="json"))

    def test_batch_size_does_not_change_the_scores(self, engine, ragged_plan):
        whole = engine.execute(ragged_plan)
        for path, named in engine.execute(ragged_plan, batch_size=3).items():
            for name, tensor in named.items():
                torch.testing.assert_close(tensor, whole[path][name], rtol=1e-5, atol=1e-5)

    def test_progress_is_reported_once_per_step(self, engine, ragged_plan):
        seen = []
        engine.execute(ragged_plan, progress=seen.append)
        assert seen == [s.path for s in ragged_plan.steps()]

    def test_a_batch_size_below_one_is_refused(self, engine, ragged_plan):
        from causalab_core.errors import EngineError

        with pytest.raises(EngineError, match="batch size must be 1 or more"):
            engine.execute(ragged_plan, batch_size=0)

    def test_remote_is_local_simulation_or_refused(self, engine, ragged_plan):
        """A remote-capable engine gives the same numbers through nnsight's serialized path; others refuse."""
        from causalab_core.errors import EngineError

        if "remote" in engine.capabilities:
            self.assert_same(engine.execute(ragged_plan, remote="local"), engine.execute(ragged_plan))
        else:
            with pytest.raises(EngineError, match="remote"):
                engine.execute(ragged_plan, remote=True)
