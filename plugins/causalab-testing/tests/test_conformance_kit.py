"""The conformance kit catches bad plugins: each check fails on a plugin broken for it, and passes on a sound one.

Each check is called as a plain method with the fixture values it takes; a failure is pytest's ``Failed``
(``pytest.fail``) or an ``AssertionError``, and its message says what is wrong.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from causalab_core import api
from causalab_core.contracts import (
    CausalModel, Featurizer, Metric, PositionResolver, Resolved, RowText, mean_over_eligible,
)
from causalab_testing.conformance import (
    CausalModelConformance,
    EngineConformance,
    FeaturizerConformance,
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
        super().__init__(params, width)
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
])
def test_a_broken_causal_model_fails_its_check(model, check, match):
    fails(getattr(CausalModelConformance(), check), model(), match=match)
