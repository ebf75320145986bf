"""``FeaturizerConformance``: what a featurizer must do on a made-up site."""

from __future__ import annotations


import pytest
import torch

from causalab_core.runtime import swap

from causalab_testing.conformance.common import must_override, assert_params_forbid_unknown_keys



def _outputs(featurizer, x: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        f, err = featurizer.featurize(x)
        return [t for t in (f, *_flat(err), featurizer.inverse(f, err), swap(featurizer, x, x.flip(0)))
                if t is not None]


def _flat(err) -> tuple:
    """What a featurizer leaves out, as tensors: it may be a tensor, None, or a tuple of them."""
    return tuple(t for e in err for t in _flat(e)) if isinstance(err, tuple) else (err,)


def fitted(featurizer, seed: int = 5):
    """A featurizer fitted from activations (``fits = "activations"``) on seeded samples, as the training pass
    fits it (``featurize`` under no_grad, then ``settle``); any other as it is."""
    if getattr(featurizer, "fits", "interchange") == "activations":
        with torch.no_grad():
            featurizer.featurize(torch.randn(4 * featurizer.width, featurizer.width,
                                             generator=torch.Generator().manual_seed(seed)))
        featurizer.settle()
    return featurizer


class FeaturizerConformance:
    """``inverse(featurize(x)) == x``; swapping a value with itself changes nothing; two instances made with the
    same parameters agree whatever torch's global random state (engines make their own, separately); the
    parameters forbid unknown keys; a trainable featurizer's ``state()`` loaded into a fresh one gives its outputs.

    Override ``featurizer``: an instance, made as an engine makes it (``cls(params, width)``).
    """

    @pytest.fixture
    def featurizer(self):
        must_override("featurizer")

    def sample(self, featurizer, rows: int = 6) -> torch.Tensor:
        return torch.randn(rows, featurizer.width, generator=torch.Generator().manual_seed(0))

    def fresh(self, featurizer, global_seed: int):
        """A new instance with the same parameters, made under another global random state (restored after)."""
        return self.made(featurizer, global_seed, fit=True)

    @staticmethod
    def made(featurizer, global_seed: int, *, fit: bool):
        """An instance as the compiler and an engine make it: the files its ``paths`` name read into it; fitted
        on the suite's samples where it is fitted from activations and ``fit`` is asked."""
        cls = type(featurizer)
        params = cls.Params.model_validate(featurizer.params.model_dump(mode="json"))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(global_seed)
            made = cls(params, featurizer.width)
        if getattr(cls, "paths", ()):
            made.load_state(cls.read_files(params, featurizer.width))
        return fitted(made) if fit else made

    def test_inverse_undoes_featurize(self, featurizer):
        x = self.sample(featurizer)
        torch.testing.assert_close(featurizer.inverse(*featurizer.featurize(x)), x)

    def test_swapping_a_value_with_itself_is_the_identity(self, featurizer):
        x = self.sample(featurizer)
        torch.testing.assert_close(swap(featurizer, x, x), x)

    def test_swap_keeps_the_base_dtype(self, featurizer):
        x = self.sample(featurizer).to(torch.bfloat16)
        assert swap(featurizer, x, x.flip(0)).dtype == torch.bfloat16

    def test_two_instances_with_the_same_params_agree(self, featurizer):
        """Each engine (and each run) makes its own instance: what it computes follows from its parameters alone."""
        x = self.sample(featurizer)
        one, other = self.fresh(featurizer, 1), self.fresh(featurizer, 2)
        for a, b in zip(_outputs(one, x), _outputs(other, x)):
            if a.shape != b.shape or not torch.equal(a, b):
                pytest.fail(f"featurizer {featurizer.name!r}: two instances with parameters "
                            f"{featurizer.params.model_dump(mode='json')} compute different values (made under "
                            "different global random states): draw anything random from a generator seeded by "
                            "the parameters", pytrace=False)

    def test_how_it_is_fitted_and_its_units_are_what_it_declares(self, featurizer):
        """``fits`` is one of the two ways (``activations`` only for a trainable one); ``has_units``: the same
        number of features whatever the input, which a featurizer over them is made as wide as."""
        fits = getattr(featurizer, "fits", "interchange")
        assert fits in ("interchange", "activations"), f"featurizer {featurizer.name!r}: fits = {fits!r}"
        assert fits == "interchange" or getattr(featurizer, "trainable", False), (
            f"featurizer {featurizer.name!r} is fitted from activations but not trainable")
        if getattr(featurizer, "has_units", None) and featurizer.has_units(featurizer.params):
            x = self.sample(featurizer)
            with torch.no_grad():
                widths = {featurizer.featurize(part)[0].shape[-1] for part in (x, x[:1], torch.zeros_like(x[:2]))}
            if len(widths) != 1:
                pytest.fail(f"featurizer {featurizer.name!r} says it has units (has_units) but gives "
                            f"{sorted(widths)} features on different inputs", pytrace=False)

    def test_it_can_travel_by_value(self, featurizer):
        """No method calls a bare ``super()``: on an NDIF server without the plugin the class is rebuilt from its
        source, where a zero-argument ``super()`` has no ``__class__`` cell and fails."""
        import ast
        import inspect
        import textwrap

        found = []
        for cls in type(featurizer).__mro__:
            if not cls.__module__.startswith(("torch", "builtins", "pydantic")):
                try:
                    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
                except (OSError, TypeError):
                    continue
                found += [f"{cls.__qualname__}.{function.name}" for function in ast.walk(tree)
                          if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                          for node in ast.walk(function) if isinstance(node, ast.Call)
                          and getattr(node.func, "id", None) == "super" and not node.args]
        if found:
            pytest.fail(f"featurizer {featurizer.name!r}: {', '.join(found)} call a bare super(); name the base class "
                        "(Featurizer.__init__(self, params, width)): a class shipped by value has no __class__ cell",
                        pytrace=False)

    def test_params_forbid_unknown_keys(self, featurizer):
        assert_params_forbid_unknown_keys(f"featurizer {featurizer.name!r}", type(featurizer).Params,
                                          featurizer.params.model_dump(mode="json"))

    def test_state_round_trips_into_a_fresh_instance(self, featurizer):
        """What training saves (``state()``, as safetensors bytes) loaded into a fresh instance gives the same outputs."""
        if not getattr(featurizer, "trainable", False):
            pytest.skip("not trainable")
        from safetensors.torch import load, save

        by_activations = getattr(featurizer, "fits", "interchange") == "activations"
        if by_activations:  # fitted on other samples than an untrained one compared below would be
            trained = fitted(self.made(featurizer, 3, fit=False), seed=11)
        else:
            trained = self.fresh(featurizer, 3)
            assert list(trained.parameters()), f"trainable featurizer {featurizer.name!r} has no parameters to train"
            gen = torch.Generator().manual_seed(11)
            with torch.no_grad():  # stands in for training: every parameter moves
                for p in trained.parameters():
                    p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        state = trained.state()
        assert state and all(isinstance(v, torch.Tensor) for v in state.values()), (
            f"featurizer {featurizer.name!r}: state() must be a non-empty dict of tensors for a trainable featurizer")
        loaded = self.made(featurizer, 4, fit=not by_activations)
        loaded.load_state(load(save({k: v.contiguous() for k, v in state.items()})))
        x = self.sample(featurizer)
        for a, b in zip(_outputs(trained, x), _outputs(loaded, x)):
            if a.shape != b.shape or not torch.allclose(a, b, rtol=0, atol=1e-5):
                pytest.fail(f"featurizer {featurizer.name!r}: a fresh instance after load_state(state()) computes "
                            "other values than the one whose state it loaded", pytrace=False)
        untrained = self.fresh(featurizer, 3)
        assert any(not torch.allclose(a, b, rtol=0, atol=1e-5) for a, b in zip(_outputs(trained, x), _outputs(untrained, x))), (
            f"featurizer {featurizer.name!r}: moving every parameter changed nothing it computes")
