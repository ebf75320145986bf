"""The conformance kit catches bad plugins: each check fails on a plugin broken for it, and passes on a sound one.

Each check is called as a plain method with the fixture values it takes; a failure is pytest's ``Failed``
(``pytest.fail``) or an ``AssertionError``, and its message says what is wrong.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from causalab_core import api, hookimpl
from causalab_core.plugins.contracts import (
    CausalModel, Featurizer, Intervention, Metric, PositionResolver, Recipe, Resolved, RowText, mean_over_eligible,
)
from causalab_testing.conformance import (
    CausalModelConformance,
    EngineConformance,
    FeaturizerConformance,
    InterventionConformance,
    MetricConformance,
    PositionResolverConformance,
    independent_forward,
    ragged_rows,
)
from causalab_testing.data import sweep_document, weekday_rows

FAILED = (pytest.fail.Exception, AssertionError)


def fails(check, *args, match: str):
    with pytest.raises(FAILED, match=match):
        check(*args)


# -- metrics ---------------------------------------------------------------------


class AnswerParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    answer: str


class Brier(Metric):
    """A sound metric: (1 - p(answer))^2."""

    name = "kit_brier"
    Params = AnswerParams

    def columns(self, params):
        return (params.answer,)

    def compute(self, params, inputs):
        p = (inputs.column(params.answer) - inputs.logsumexp).exp()
        return mean_over_eligible(((1 - p) ** 2).tolist(), inputs.eligible)


class FirstColumnBrier(Brier):
    """Broken: reads the first column of the logits, whichever column that is."""

    def compute(self, params, inputs):
        p = (inputs.logits[:, 0] - inputs.logsumexp).exp()
        return mean_over_eligible(((1 - p) ** 2).tolist(), inputs.eligible)


class NaNBrier(Brier):
    """Broken: NaN where the answer is unlikely (0 * log 0, as a careless entropy would)."""

    def compute(self, params, inputs):
        values = super().compute(params, inputs).rows
        return mean_over_eligible([float("nan") if v is not None and v > 0.5 else (v or 0.0) for v in values],
                                  inputs.eligible)


class LooseParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")
    answer: str


class LooseBrier(Brier):
    """Broken: its parameters take any key, so `{"answr": ...}` typos pass silently."""

    Params = LooseParams


class IgnoringParams(BaseModel):  # pydantic's default: extra keys ignored
    answer: str


class IgnoringBrier(Brier):
    Params = IgnoringParams


class InfiniteBrier(Brier):
    """Broken: log of a probability that underflows on tied logits."""

    def compute(self, params, inputs):
        p = (inputs.column(params.answer) - inputs.logsumexp).exp()
        return mean_over_eligible((p - p.mean()).abs().log().tolist(), inputs.eligible)


class ConstantMetric(Brier):
    """Broken: names a column and never reads it."""

    def compute(self, params, inputs):
        return mean_over_eligible([0.5] * len(inputs.eligible), inputs.eligible)


class TestSoundMetric(MetricConformance):
    @pytest.fixture
    def metric(self):
        return Brier()

    @pytest.fixture
    def params(self):
        return Brier.Params(answer="cf")


def test_a_metric_reading_a_position_instead_of_its_column_fails():
    suite, params = MetricConformance(), AnswerParams(answer="cf")
    fails(suite.test_reads_the_columns_it_names, FirstColumnBrier(), params, match="reads a position in `logits`")
    suite.test_reads_the_columns_it_names(Brier(), params)


def test_a_metric_that_does_not_read_its_column_fails():
    fails(MetricConformance().test_follows_each_column_it_names, ConstantMetric(), AnswerParams(answer="cf"),
          match="does not read a column it names")


def test_a_metric_giving_nan_fails_saying_nan():
    suite, params = MetricConformance(), AnswerParams(answer="cf")
    fails(suite.test_values_are_finite_numbers, NaNBrier(), params, 0, 3.0,
          match=r"metric 'kit_brier' gave nan for eligible row \d+ on generic .*must be a finite number")
    fails(suite.test_degenerate_inputs_give_numbers, InfiniteBrier(), params, match="gave -inf for eligible row")
    # and the other checks do not trip over it by accident
    suite.test_is_deterministic(NaNBrier(), params)
    suite.test_one_value_per_row_and_none_where_not_eligible(NaNBrier(), params)


@pytest.mark.parametrize("metric,params", [(LooseBrier(), LooseParams(answer="cf")),
                                           (IgnoringBrier(), IgnoringParams(answer="cf"))], ids=["allow", "ignore"])
def test_metric_params_that_take_unknown_keys_fail(metric, params):
    fails(MetricConformance().test_params_forbid_unknown_keys, metric, params,
          match="accepted the unknown key 'surely_not_a_parameter'.*extra=\"forbid\"")


def test_the_metric_inputs_are_those_an_engine_would_bring_home():
    """Answer logits and log-sum-exp of one full-vocabulary draw; ranks and log-probabilities when needed."""
    from causalab_testing.conformance import metric_inputs

    vocab = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    got = metric_inputs(vocab, ("a", "b"), {"a": [1, 2, 3], "b": [4, 4, 4]}, [True] * 3, ("answers", "ranks", "logprobs"))
    assert torch.equal(got.column("a"), vocab[torch.arange(3), torch.tensor([1, 2, 3])])
    assert torch.equal(got.logsumexp, vocab.logsumexp(-1))
    if hasattr(got, "ranks"):
        assert got.ranks[0, 1].item() == int((vocab[0] > vocab[0, 4]).sum())
        torch.testing.assert_close(got.logprobs.exp().sum(-1), torch.ones(3))


# -- featurizers -------------------------------------------------------------------


class RotationParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    seed: int | None = None


class Rotation(Featurizer):
    """An orthogonal rotation: seeded by its parameters (sound), or drawn from torch's global state (broken)."""

    name = "kit_rotation"
    Params = RotationParams

    def __init__(self, params, width):
        Featurizer.__init__(self, params, width)
        gen = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        self.q = torch.linalg.qr(torch.randn(width, width, generator=gen))[0]

    def featurize(self, x):
        rotated = x.float() @ self.q
        return rotated[..., :2], rotated[..., 2:]

    def inverse(self, f, err):
        return torch.cat([f, err], -1) @ self.q.T


class LooseRotationParams(RotationParams):
    model_config = ConfigDict(frozen=True, extra="ignore")


class LooseRotation(Rotation):
    Params = LooseRotationParams


class Scale(torch.nn.Module, Featurizer):
    """A trainable per-coordinate scale; ``forgetful`` (broken) saves its state but never loads it back."""

    name = "kit_scale"
    trainable = True
    forgetful = False

    def __init__(self, params, width):
        torch.nn.Module.__init__(self)
        Featurizer.__init__(self, params, width)
        self.scale = torch.nn.Parameter(torch.ones(width))

    def featurize(self, x):
        return x.float() * self.scale, None

    def inverse(self, f, err):
        return f / self.scale

    def state(self):
        return {"scale": self.scale.detach().clone()}

    def load_state(self, tensors):
        if not self.forgetful:
            with torch.no_grad():
                self.scale.copy_(tensors["scale"])


class ForgetfulScale(Scale):
    forgetful = True


class TestSoundFeaturizer(FeaturizerConformance):
    @pytest.fixture(params=["rotation", "scale"])
    def featurizer(self, request):
        return Rotation(RotationParams(seed=3), 6) if request.param == "rotation" else Scale(Scale.Params(), 6)


def test_a_rotation_drawn_without_a_seed_fails():
    fails(FeaturizerConformance().test_two_instances_with_the_same_params_agree, Rotation(RotationParams(), 6),
          match="two instances with parameters .* compute different values")
    # It passes every other check: that is why this one exists.
    for check in ("test_inverse_undoes_featurize", "test_swapping_a_value_with_itself_is_the_identity",
                  "test_swap_keeps_the_base_dtype", "test_params_forbid_unknown_keys"):
        getattr(FeaturizerConformance(), check)(Rotation(RotationParams(), 6))


def test_featurizer_params_that_ignore_unknown_keys_fail():
    fails(FeaturizerConformance().test_params_forbid_unknown_keys, LooseRotation(LooseRotationParams(seed=1), 6),
          match="featurizer 'kit_rotation': LooseRotationParams accepted the unknown key")


def test_a_trainable_featurizer_that_does_not_load_its_state_fails():
    fails(FeaturizerConformance().test_state_round_trips_into_a_fresh_instance, ForgetfulScale(Scale.Params(), 6),
          match="after load_state\\(state\\(\\)\\) computes other values")


class Active(Rotation):
    """Claims fixed units (``has_units``) but keeps only the coordinates that are positive somewhere (broken)."""

    @classmethod
    def has_units(cls, params):
        return True

    def featurize(self, x):
        keep = (x > 0).any(0).any(0) if x.dim() > 2 else (x > 0).any(0)
        return x[..., keep], (x, keep)

    def inverse(self, f, err):
        x, keep = err
        out = x.clone()
        out[..., keep] = f
        return out


class Polite(Rotation):
    """Calls a bare super() (broken: it fails where the class is shipped by value)."""

    def __init__(self, params, width):
        super().__init__(params, width)


def test_a_featurizer_calling_a_bare_super_fails():
    fails(FeaturizerConformance().test_it_can_travel_by_value, Polite(RotationParams(seed=1), 6),
          match="Polite.__init__ call a bare super")


def test_a_featurizer_whose_units_vary_with_the_input_fails():
    fails(FeaturizerConformance().test_how_it_is_fitted_and_its_units_are_what_it_declares,
          Active(RotationParams(seed=1), 6), match="says it has units .* gives .* features on different inputs")


# -- position resolvers --------------------------------------------------------------


class LastWordResolver(PositionResolver):
    """``{"last_word": true}``: the last token; ``greedy`` (broken) also takes plain integers."""

    name = "kit_last_word"
    greedy = False

    def accepts(self, spec):
        if self.greedy and isinstance(spec, int) and not isinstance(spec, bool):
            return True
        return spec == {"last_word": True}

    def resolve(self, spec, row):
        if isinstance(spec, int):
            return Resolved(positions=(spec % len(row.ids),))
        return Resolved(positions=(len(row.ids) - 1,))


class GreedyResolver(LastWordResolver):
    greedy = True


class PickyResolver(LastWordResolver):
    """Broken: raises on forms it does not know, where it must answer False."""

    def accepts(self, spec):
        return spec["last_word"] is True


ROWS = [RowText("a b c", (1, 2, 3), ((0, 1), (2, 3), (4, 5)), {})]


class TestSoundResolver(PositionResolverConformance):
    @pytest.fixture
    def resolver(self):
        return LastWordResolver()

    @pytest.fixture
    def specs(self):
        return [{"last_word": True}]

    @pytest.fixture
    def rows(self):
        return ROWS


def test_a_resolver_that_also_takes_plain_integers_fails():
    suite = PositionResolverConformance()
    foreign = suite.foreign_specs_for(GreedyResolver())
    assert -1 in foreign and {"variable": "day"} in foreign  # the index and variable resolvers' forms
    fails(suite.test_refuses_forms_it_does_not_own, GreedyResolver(), [{"last_word": True}], foreign,
          match="resolver 'kit_last_word' accepts 0, 3, -1, -7, forms it does not own")


def test_a_resolver_that_raises_on_a_foreign_form_fails():
    fails(PositionResolverConformance().test_refuses_forms_it_does_not_own, PickyResolver(), [{"last_word": True}],
          [None, 0], match=r"accepts\(None\) raised TypeError")


def test_the_shipped_index_resolver_keeps_its_own_forms():
    from causalab_positions.index import IndexResolver

    suite = PositionResolverConformance()
    foreign = suite.foreign_specs_for(IndexResolver())
    assert not [s for s in foreign if type(s) is int] and {"index": 2} not in foreign and {"variable": "day"} in foreign


# -- engines ------------------------------------------------------------------------


@pytest.fixture
def plan(write_doc, tiny_gpt2):
    """Padded batches on the GPT-2 (absolute positions: a wrong position id changes the numbers)."""
    return api.plan(write_doc(sweep_document(str(tiny_gpt2), layers=[0, 2], positions=[-4, -1]), ragged_rows()))


def _without_writes(plan):
    points = tuple(dataclasses.replace(p, steps=tuple(dataclasses.replace(s, writes=()) if s.kind == "run" else s
                                                       for s in p.steps)) for p in plan.points)
    return dataclasses.replace(plan, points=points)


def test_an_engine_that_forgets_its_writes_fails_against_the_independent_forward(plan):
    """The hooks engine is no longer its own reference: a broken one is caught by the kit's own forward."""
    from causalab_hooks.engine import HooksEngine

    class Forgetful(HooksEngine):
        name = "kit_forgetful"

        def execute(self, plan, **options):
            return super().execute(_without_writes(plan), **options)

    suite = EngineConformance()
    fails(suite.test_scores_match_an_independent_forward, Forgetful(), plan, match="answer_logits")
    suite.test_scores_match_an_independent_forward(HooksEngine(), plan)


def test_an_engine_that_drops_padding_fails_against_the_independent_forward(plan):
    """Scores of padded rows computed as if the batch were unpadded (position ids from 0 on padding)."""
    from causalab_hooks import engine as hooks

    class NoPositionIds(hooks.HooksEngine):
        name = "kit_no_position_ids"

        def execute(self, plan, **options):
            real = hooks.plain_forward
            hooks.plain_forward = lambda model, batch: real(model, dataclasses.replace(
                batch, position_ids=torch.arange(batch.input_ids.shape[1]).expand_as(batch.input_ids)))
            try:
                return super().execute(plan, **options)
            finally:
                hooks.plain_forward = real

    fails(EngineConformance().test_scores_match_an_independent_forward, NoPositionIds(), plan, match="answer_logits")


def test_the_hooks_engine_is_not_its_own_reference():
    from causalab_hooks.engine import HooksEngine
    from causalab_nnterp.engine import NnterpEngine

    suite = EngineConformance()
    assert suite.reference_for(HooksEngine()) is None
    assert isinstance(suite.reference_for(NnterpEngine()), HooksEngine)


def test_the_independent_forward_patches_and_reads_unpadded_rows(write_doc, tiny_llama):
    """Its clean runs are the model's own logits; a write changes them."""
    from transformers import AutoModelForCausalLM

    rows = weekday_rows(3)
    plan = api.plan(write_doc(sweep_document(str(tiny_llama), layers=[1], positions=[-1]), rows))
    scored = plan.points[0].steps[-1]
    got = independent_forward(plan)[scored.path]
    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    with torch.no_grad():
        clean = torch.stack([model(input_ids=torch.tensor([ids])).logits[0, -1] for ids in plan.prompts["base"]])
    assert not torch.allclose(got["answer_logits"], clean.gather(1, torch.tensor(scored.scoring.token_ids)))
    unpatched = independent_forward(_without_writes(plan))[scored.path]
    torch.testing.assert_close(unpatched["answer_logits"], clean.gather(1, torch.tensor(scored.scoring.token_ids)),
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(unpatched["logsumexp"], clean.logsumexp(-1), rtol=0, atol=1e-5)


def test_engine_options_that_take_unknown_keys_fail():
    from causalab_hooks.engine import HooksEngine

    class LooseOptions(BaseModel):
        optimize: bool = True

    class Loose(HooksEngine):
        Options = LooseOptions

    fails(EngineConformance().test_options_forbid_unknown_keys, Loose(), match="engine 'hooks': LooseOptions accepted")


# -- causal models -------------------------------------------------------------------


class Sums(CausalModel):
    """``total = a + b``, ``answer`` its last digit; a setting is in test where ``a`` is 3."""

    name = "kit_sums"
    inputs = ("a", "b")
    mechanisms = {"total": ("a", "b"), "answer": ("total",)}

    def sample(self, rng, variable):
        return rng.randrange(10)

    def domain(self, variable):
        return list(range(10))

    def compute(self, variable, parents):
        return parents["a"] + parents["b"] if variable == "total" else str(parents["total"] % 10)

    def prompt(self, values):
        return f"{values['a']} plus {values['b']} ends in"

    def answer(self, values):
        return " " + values["answer"]

    def split(self, inputs):
        return "test" if inputs["a"] == 3 else "train"


class OutOfOrder(Sums):
    """Broken: `answer` is listed before the `total` it is computed from."""

    mechanisms = {"answer": ("total",), "total": ("a", "b")}


class GlobalRandom(Sums):
    """Broken: samples from `random`'s global state, not the rng it is handed."""

    def sample(self, rng, variable):
        import random

        return random.randrange(10)


class Peeking(Sums):
    """Broken: computes `answer` from `a`, which its mechanism does not list."""

    def compute(self, variable, parents):
        return super().compute(variable, parents) if variable == "total" else str(parents["a"])


class Counting(Sums):
    """Broken: `total` depends on how often it was computed (hidden state)."""

    calls = 0

    def compute(self, variable, parents):
        if variable != "total":
            return str(parents["total"] % 10)
        type(self).calls += 1
        return parents["a"] + parents["b"] + type(self).calls


class Wordless(Sums):
    """Broken: the answer is a number, not a text."""

    def answer(self, values):
        return int(values["answer"])


class AllTrain(Sums):
    """Broken: every setting in train, so a test document gets no rows."""

    def split(self, inputs):
        return "train"


class SplitOnAnswer(Sums):
    """Broken: splits on a derived variable, which split is never handed."""

    def split(self, inputs):
        return "test" if inputs["total"] > 9 else "train"


class Shadowing(Sums):
    """Broken: a variable `cf_a` beside `a`, whose counterfactual column it would take."""

    inputs = ("a", "b", "cf_a")


class ShortDomain(Sums):
    """Broken: its domain leaves out a value sampling draws, so a population would miss rows."""

    def domain(self, variable):
        return list(range(9))


class LooseSumsParams(BaseModel):
    scale: int = 1


class LooseSums(Sums):
    """Broken: its parameters take any key."""

    Params = LooseSumsParams


class TestSoundCausalModel(CausalModelConformance):
    @pytest.fixture
    def causal_model(self):
        return Sums()


@pytest.mark.parametrize("model,check,match", [
    (OutOfOrder, "test_has_a_name_and_variables_in_causal_order", "parent 'total' of 'answer' is not an input nor"),
    (GlobalRandom, "test_sampling_follows_the_rng_it_is_handed_alone", "two rngs seeded alike sampled different"),
    (Peeking, "test_each_derived_value_is_a_function_of_its_parents", "read 'a', which is not among the parents"),
    (Counting, "test_each_derived_value_is_a_function_of_its_parents", "'total' from the same parents gave"),
    (Counting, "test_an_intervention_changes_only_the_variable_and_its_descendants", "not a descendant"),
    (Wordless, "test_prompt_and_answer_are_texts", "each must be a non-empty string"),
    (AllTrain, "test_split_puts_every_setting_in_train_or_test_from_its_inputs", "all fell in 'train'"),
    (SplitOnAnswer, "test_split_puts_every_setting_in_train_or_test_from_its_inputs", "split read 'total'"),
    (Shadowing, "test_columns_leave_the_rows_own_alone", "variable 'cf_a' would write its value to 'cf_a'"),
    (LooseSums, "test_params_forbid_unknown_keys", "LooseSumsParams accepted the unknown key"),
    (ShortDomain, "test_a_domain_lists_every_value_sampling_gives", "draws 'a' values its domain does not list"),
])
def test_a_broken_causal_model_fails_its_check(model, check, match):
    fails(getattr(CausalModelConformance(), check), model(), match=match)


# -- interventions -------------------------------------------------------------------


class PullParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    alpha: float = 0.5


class Pull(Intervention):
    """A sound custom kind: part of the way from the site's value to the source's, ``x + alpha (v - x)``."""

    name = "kit_pull"
    Params = PullParams

    def recipe(self, params):
        return Recipe("source", "custom")

    def apply(self, x, v, params):
        return x + params.alpha * (v - x)


class BatchCentred(Pull):
    """Broken: adds the batch's mean site value, so every row in the batch (eligible or not) moves every other."""

    name = "kit_batch_centred"

    def apply(self, x, v, params):
        return super().apply(x, v, params) + x.mean(0, keepdim=True)


class OneLate(Pull):
    """Broken: writes each position's value at the next position of the window (the first keeps its own)."""

    name = "kit_one_late"

    def apply(self, x, v, params):
        out = super().apply(x, v, params)
        return torch.cat([out[:, :1], out[:, :-1]], 1)


class Jittery(Pull):
    """Broken: a little noise from torch's global generator, so no two engines (or runs) write the same bytes."""

    name = "kit_jittery"

    def apply(self, x, v, params):
        return super().apply(x, v, params) + 1e-3 * torch.randn(x.shape)


class LastOnly(Pull):
    """Broken: returns the last position only, ``[rows, width]``, not the window."""

    name = "kit_last_only"

    def apply(self, x, v, params):
        return super().apply(x, v, params)[:, -1]


class LoosePullParams(PullParams):
    model_config = ConfigDict(frozen=True, extra="allow")


class LoosePull(Pull):
    """Broken: its parameters take any key."""

    name = "kit_loose_pull"
    Params = LoosePullParams


class IgnoringPullParams(BaseModel):  # pydantic's default: extra keys ignored
    alpha: float = 0.5


class IgnoringPull(Pull):
    name = "kit_ignoring_pull"
    Params = IgnoringPullParams


class LuckyNoise(Intervention):
    """Broken: its recipe draws the noise's seed from `random`'s global state."""

    name = "kit_lucky_noise"

    def recipe(self, params):
        import random

        return Recipe("noise", "add", alpha=1.0, seed=random.randrange(2**20))


class Applyless(Intervention):
    """Broken: a `custom` recipe and no `apply`."""

    name = "kit_applyless"

    def recipe(self, params):
        return Recipe("source", "custom")


class Overreaching(Intervention):
    """Broken: a need no engine knows."""

    name = "kit_overreaching"

    def recipe(self, params):
        return Recipe("everything", "replace")


class TestSoundIntervention(InterventionConformance):
    @pytest.fixture
    def intervention(self):
        return Pull()

    @pytest.fixture
    def params(self):
        return [{}, {"alpha": 2.0}]


PULLS = [{"alpha": 0.5}]


@pytest.mark.parametrize("kind,check,match", [
    (BatchCentred, "check_apply_is_row_by_row", "row 0's value computed alone differs from its value in the batch"),
    (OneLate, "check_apply_is_position_by_position", "position 1 of a 3-position window gets another value"),
    (Jittery, "check_apply_is_deterministic", "apply gave different values for the same inputs"),
    (LastOnly, "check_apply_keeps_the_site_shape", r"returned \[5, 32\] torch.float32 for x of shape \[5, 3, 32\]"),
    (LoosePull, "test_params_forbid_unknown_keys", "LoosePullParams accepted the unknown key"),
    (IgnoringPull, "test_params_forbid_unknown_keys", "IgnoringPullParams accepted the unknown key"),
    (LuckyNoise, "test_recipe_follows_its_params_alone", "two recipes for the same parameters"),
    (Applyless, "test_recipe_is_a_contract_recipe", "combine `custom` needs an `apply` method"),
    (Overreaching, "test_recipe_is_a_contract_recipe", "needs 'everything' is not one of"),
])
def test_a_broken_intervention_fails_its_check(kind, check, match):
    params = PULLS if issubclass(kind, Pull) else [{}]
    vector = () if check.startswith(("test_recipe", "test_params")) else (None,)
    fails(getattr(InterventionConformance(), check), kind(), params, *vector, match=match)


def test_a_broken_kind_passes_the_checks_it_is_not_broken_for():
    """Each broken kind is caught by its own check, not by accident: the others pass it."""
    suite = InterventionConformance()
    suite.check_apply_is_row_by_row(OneLate(), PULLS, None)
    suite.check_apply_is_deterministic(OneLate(), PULLS, None)
    suite.check_apply_is_position_by_position(BatchCentred(), PULLS, None)
    suite.check_apply_keeps_the_site_shape(Jittery(), PULLS, None)
    suite.test_recipe_is_a_contract_recipe(LuckyNoise(), [{}])


def test_a_kind_mixing_rows_moves_eligible_rows_when_the_others_are_dropped(tiny_llama, tmp_path):
    """End to end: the batch's mean lets the rows that are not eligible change the eligible ones' values."""
    suite = InterventionConformance()
    fails(suite.test_rows_not_eligible_are_left_out_and_move_no_other_row, BatchCentred(), PULLS, None, tiny_llama,
          tmp_path / "broken", match=r"eligible rows \[0, 1, 2, 3\] changed when the 2 rows that are not eligible")
    suite.test_rows_not_eligible_are_left_out_and_move_no_other_row(Pull(), PULLS, None, tiny_llama, tmp_path / "sound")


def _shifted_windows(plan):
    """The plan with every write's window one position earlier (what an engine off by one would write)."""
    def shifted(write):
        return dataclasses.replace(write, windows=tuple(tuple(p - 1 for p in w) for w in write.windows))

    points = tuple(dataclasses.replace(p, steps=tuple(
        dataclasses.replace(s, writes=tuple(shifted(w) if w.name == "kit_write" else w for w in s.writes))
        if s.kind == "run" else s for s in p.steps)) for p in plan.points)
    return dataclasses.replace(plan, points=points)


def test_a_write_at_the_wrong_position_fails_the_window_check(tiny_llama, tmp_path):
    """Run on an engine that writes one position early, the site's value changes outside the window."""
    from causalab_hooks.engine import HooksEngine

    class OffByOne(HooksEngine):
        name = "kit_off_by_one"

        def execute(self, plan, **options):
            return super().execute(_shifted_windows(plan), **options)

    module = types.ModuleType("kit_off_by_one")
    module.causalab_engines = hookimpl(lambda: [OffByOne])

    class OnOffByOne(InterventionConformance):
        engine, plugins = "kit_off_by_one", (module,)

    fails(OnOffByOne().test_a_run_changes_the_site_only_at_the_written_window, Pull(), PULLS, None, tiny_llama,
          tmp_path / "broken", match=r"row 0's value at position 8, outside the written window \[9, 10\], changed")
    InterventionConformance().test_a_run_changes_the_site_only_at_the_written_window(Pull(), PULLS, None, tiny_llama,
                                                                                     tmp_path / "sound")


@pytest.fixture
def intervention_plan(write_doc, tiny_gpt2):
    """The engine suite's intervention plan on the GPT-2 (padded batches, absolute positions)."""
    return EngineConformance.interventions_of(tiny_gpt2, write_doc)


def test_an_engine_that_ignores_std_of_fails_against_the_independent_forward(intervention_plan):
    """Noise in plain units, not in units of the `std_of` read's spread, is caught by the kit's own forward."""
    from causalab_hooks.engine import HooksEngine

    def without_std_of(plan):
        def plain(write):
            iv = write.intervention
            return write if iv is None or iv.std_of is None else dataclasses.replace(
                write, intervention=dataclasses.replace(iv, std_of=None))
        points = tuple(dataclasses.replace(p, steps=tuple(dataclasses.replace(s, writes=tuple(map(plain, s.writes)))
                                                          for s in p.steps)) for p in plan.points)
        return dataclasses.replace(plan, points=points)

    class Unscaled(HooksEngine):
        name = "kit_unscaled"

        def execute(self, plan, **options):
            return super().execute(without_std_of(plan), **options)

    assert [iv.std_of for iv in intervention_plan[0].interventions() if iv.std_of] == ["emb"]
    suite = EngineConformance()
    fails(suite.test_interventions_match_an_independent_forward, Unscaled(), intervention_plan, match="answer_logits")
    suite.test_interventions_match_an_independent_forward(HooksEngine(), intervention_plan)


def test_the_independent_forward_computes_each_kind_of_the_engine_plan(intervention_plan):
    """Every write of the engine suite's plan changes the scores (none is a silent no-op in the kit), and the
    writes use every need and combination core has, `custom` included; but for the swap of the noised run's
    value at the noise's own site, which the read records before the noise is written: the base prompt's own
    value, so dropping that write changes nothing."""
    plan, classes = intervention_plan
    refs = plan.interventions()
    assert {iv.needs for iv in refs} == {"mean", "tensor", "noise", "nothing", "source"}
    assert {iv.combine for iv in refs} == {"replace", "add", "scale", "custom"}
    full = independent_forward(plan, featurizers=classes)
    base = [s.path for s in plan.steps() if s.input == "base"][0]
    for name in ("ablate", "mean", "diff", "steer", "restore", "custom", "unnoised"):
        points = tuple(dataclasses.replace(p, steps=tuple(dataclasses.replace(
            s, writes=tuple(w for w in s.writes if w.name != name)) for s in p.steps)) for p in plan.points)
        without = independent_forward(dataclasses.replace(plan, points=points), featurizers=classes)
        same = torch.allclose(full[base]["answer_logits"], without[base]["answer_logits"], rtol=0, atol=1e-4)
        assert same == (name == "unnoised"), name


def test_an_engine_that_reads_after_the_write_at_the_same_site_fails(intervention_plan):
    """A read records the value arriving at its site: an engine recording it after that site's write (the
    noised value, where the plan swaps the noised run's clean day back into the base run) is caught."""
    from causalab_core.runtime import applier, as_heads, gather, put
    from causalab_hooks import engine as hooks

    def late_reads(reads, writes, batch, store, swaps, stop):
        span = slice(batch.start, batch.stop)

        def edit(hidden):
            hidden = hidden.clone()
            for write in writes:
                put(as_heads(hidden, write.site), write, span, batch.offsets, store, swaps[write.name],
                    swaps.get(applier(write)))
            for read in reads:
                store[read.name][span] = gather(as_heads(hidden, read.site), read.windows[span], batch.offsets)
            if stop:
                raise hooks._StopForward
            return hidden
        return edit

    class LateReads(hooks.HooksEngine):
        name = "kit_late_reads"

        def execute(self, plan, **options):
            real = hooks.editor
            hooks.editor = late_reads
            try:
                return super().execute(plan, **options)
            finally:
                hooks.editor = real

    fails(EngineConformance().test_interventions_match_an_independent_forward, LateReads(), intervention_plan,
          match="base answer_logits")
