"""What each kind of plugin component looks like.

These are the shapes the registry hands out; a plugin's class need not inherit
from them (duck typing is enough), but inheriting documents intent and gives
the defaults below. The conformance suite in :mod:`causalab_testing`
checks a component against its contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from causalab_core.errors import EngineError
# The featurizer contract has a module of its own (it is the longest); it is named here with the rest.
from causalab_core.plugins.featurizing import Featurizer, NoParams  # noqa: F401

if TYPE_CHECKING:
    import torch

    from causalab_core.ir import Plan

# Capabilities an engine may declare; a plan lists what it requires.
CAPABILITIES = frozenset({"remote", "training", "heads"})

# Where a plan runs: the ``remote`` of ``api.run`` and ``Engine.execute`` is one of these cases.
Remote = bool | str
HERE: Remote = False
"""In this process (the default)."""
SIMULATED: Remote = "local"
"""Serialised and run in this process as a server would run it (nnsight's local simulation of a remote run)."""
CONFIGURED_HOST: Remote = True
"""The NDIF host from nnsight's own settings (``NDIF_HOST`` or its config file)."""
# Any other string is a host URL, e.g. "http://127.0.0.1:8001".


def remote_host(remote: Remote) -> str | None:
    """The host URL ``remote`` names, or None where it names none (here, simulated, the configured host)."""
    return remote if isinstance(remote, str) and remote != SIMULATED else None


class ReuseOptions(BaseModel):
    """The work-reuse options of the engines that run plans themselves (hooks, nnterp, ndif): the same
    switches, so a local and a remote run of one document do the same work and give the same bytes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    optimize: bool = True
    """Share read-only forwards across points and start each point at its lowest block (bit-identical).
    False: the plain path, one full forward per step per batch (and no position reuse unless asked)."""
    positions: bool | Literal["auto"] = "auto"
    """Position-level reuse: a writing run recomputes only positions >= its first written one, the clean
    run's keys and values serving the rest (``causalab_core.runtime.positions``); byte-identical between
    engines, within 1e-5 of the plain path's logits, not bitwise. ``auto``: the planner's pick, off with
    ``optimize=false`` (``causalab plan`` shows it, run.json's ``position_reuse`` records what ran;
    ``causalab_core.runtime.positions.decide``). ``true`` with ``optimize=false``: position reuse without
    shared reads."""



# -- engines ------------------------------------------------------------------


class Engine:
    """Runs a plan and returns ``{step path: {name: tensor}}``, never plan objects."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[str]] = frozenset()
    runs_remote: ClassVar[bool] = False
    """True for an engine that always sends the plan elsewhere (``remote`` is then always on)."""
    Options: ClassVar[type[BaseModel]] = NoParams
    """The engine's own options (``causalab run --option KEY=VALUE``), validated before any weights load."""

    def __init__(self, *, device_map: str | None = None, options: BaseModel | None = None):
        self.device_map = device_map
        self.options = options if options is not None else self.Options()
        self.details: dict[str, Any] = {}
        """Plain data the engine learned while running, handed to the provenance hook."""

    def record_loaded(self, model: Any) -> None:
        """Keep in ``details`` the dtype the weights of ``model`` (a transformers model) were loaded in, read off
        its LM head as an NDIF server reads its served weights: run.json's ``loaded_dtype``. Weights still on the
        meta device (a session sent elsewhere) loaded nowhere here, so nothing is claimed for them."""
        weight = model.get_output_embeddings().weight
        if weight.device.type == "meta":
            self.details.pop("loaded_dtype", None)
        else:
            self.details["loaded_dtype"] = str(weight.dtype)

    def execute(
        self,
        plan: Plan,
        *,
        featurizers: Mapping[str, type] | None = None,
        remote: Remote = HERE,
        batch_size: int | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, dict[str, torch.Tensor]]:
        """Run every step of ``plan``; call ``progress(step path)`` after each one.

        ``featurizers`` maps each featurizer kind the plan's writes use to its
        class (the caller's registry decides which; see :func:`featurizer_classes`).
        """
        raise NotImplementedError


def refuse_options(engine: Engine, *, remote: Remote, batch_size: int | None) -> None:
    """The refusals every engine makes before any work: a batch size below 1, remote where it cannot go."""
    if batch_size is not None and batch_size < 1:
        raise EngineError(f"batch size must be 1 or more, got {batch_size}")
    if remote and "remote" not in engine.capabilities:
        raise EngineError(f"engine {engine.name!r} cannot run remotely; use an engine with the remote capability "
                          "(`causalab plugins` lists each engine's)")


# -- causal models ------------------------------------------------------------


class CausalModel:
    """A high-level causal model of a task: its variables, how each follows from its parents, and the
    prompt and answer a setting of them produces.

    ``inputs`` are sampled (``sample``); every variable of ``mechanisms`` is
    computed from its parents (``compute``), in the order listed. ``split``
    assigns a setting of the inputs to ``train`` or ``test``, so the splits are
    disjoint by construction. :mod:`causalab_core.document.causal` generates the rows; a variable whose value columns
    would take a row's own (``answer``: ``cf_answer`` is the answer text) is written as ``var_<variable>``.
    ``sample`` draws from the rng it is handed alone; ``compute`` sees its parents alone; ``split`` its inputs
    alone. ``causalab_testing.conformance.CausalModelConformance`` checks all of it.
    """

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    inputs: ClassVar[tuple[str, ...]]
    mechanisms: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Derived variable -> its parents, in causal order."""

    def __init__(self, params: BaseModel | None = None):
        self.params = params if params is not None else self.Params()

    def sample(self, rng: Any, variable: str) -> Any:
        """A value of input ``variable`` drawn with ``rng`` (a ``random.Random``)."""
        raise NotImplementedError

    def domain(self, variable: str) -> Sequence[Any] | None:
        """Every value input ``variable`` takes, in a fixed order, where there are few enough to enumerate
        (a document may then ask for the whole population of pairs, ``rows: "all"``); None where not."""
        return None

    def compute(self, variable: str, parents: Mapping[str, Any]) -> Any:
        """The value of derived ``variable`` given its parents' values."""
        raise NotImplementedError

    def prompt(self, values: Mapping[str, Any]) -> str:
        """The prompt text for these input values (the base's, or a counterfactual's)."""
        raise NotImplementedError

    def answer(self, values: Mapping[str, Any]) -> str:
        """The answer text the task's model should produce (one token, usually with a leading space)."""
        raise NotImplementedError

    def split(self, inputs: Mapping[str, Any]) -> str:
        """``"train"`` or ``"test"``, from the input variables alone."""
        raise NotImplementedError


# -- positions ----------------------------------------------------------------


@dataclass(frozen=True)
class RowText:
    """One row's prompt as the compiler tokenized it, for position resolvers."""

    text: str
    ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]
    """Character span of each token in ``text``."""
    variables: Mapping[str, Any]
    """The row's other columns (prompt variables such as ``entity``)."""
    segments: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """For a chat prompt: character span of each turn's text (``system``, ``user[0]``, ..., ``generation``)."""


@dataclass(frozen=True)
class Resolved:
    """A resolver's answer for one row: token indices, or the reason there are none."""

    positions: tuple[int, ...] = ()
    reason: str | None = None


class PositionResolver:
    """Turns a position spec and one row into token indices (client side, compile time)."""

    name: ClassVar[str]

    def accepts(self, spec: Any) -> bool:
        """Whether this resolver handles this form of position spec."""
        raise NotImplementedError

    def check(self, spec: Any) -> None:
        """Raise ValueError with a short message if an accepted spec is malformed."""

    def resolve(self, spec: Any, row: RowText) -> Resolved:
        """The window of token indices ``spec`` names in this row's prompt, or the reason code it has none."""
        raise NotImplementedError


# -- featurizers --------------------------------------------------------------


# -- interventions ------------------------------------------------------------

NEEDS = ("source", "resample", "mean", "tensor", "noise", "nothing")
"""What value ``v`` an intervention needs at a site: the write's source read on the row (``source``) or on
another row drawn from a seed (``resample``); a statistic over rows, the source read's mean over its
eligible rows (``mean``, less the mean of the read ``minus`` names when given); one vector from a
safetensors file that travels in the plan with its digest (``tensor``); standard normal noise drawn on the
CPU from a seed and the row (``noise``); or none (``nothing``)."""
COMBINES = ("replace", "add", "scale", "interpolate", "custom")
"""How ``v`` meets the site's value ``x``: ``v``; ``x + alpha v``; ``alpha x``; ``(1 - alpha) x + alpha v``;
or the kind's own ``Intervention.apply`` (``custom``)."""


@dataclass(frozen=True)
class Recipe:
    """An intervention lowered to what every engine computes (``runtime.interventions``): plain data.

    The value comes from the write's ``source`` read; ``minus`` names a read whose mean a ``mean`` subtracts,
    ``tensor`` the path of a vector file (relative to the document's data folder), ``seed`` the noise's or
    the resample's seed, ``std_of`` a read whose standard deviation over its rows multiplies ``alpha`` (noise
    in units of the values it corrupts: Meng et al.'s 3 sigma of the subject's embeddings)."""

    needs: str
    combine: str
    alpha: float = 1.0
    minus: str | None = None
    tensor: str | None = None
    seed: int | None = None
    std_of: str | None = None


class Intervention:
    """What a write does at its site: ``recipe(params)`` says what it needs and how it combines.

    The math is core's (``causalab_core.runtime.interventions``), the same on every engine and on a server
    with no plugin installed; a kind is a choice of a need, a combination and their parameters. ``Params``
    forbids unknown keys; ``recipe`` raises ValueError for parameters that contradict each other (one
    line, named at the write's ``intervention``). What reuse a kind allows follows from its need: one whose
    value is a statistic over rows (``mean``) or another row's value (``resample``) needs every row's reads
    at once, so position-level reuse, which keeps one batch's, stays off for it
    (``runtime.positions.other_rows``); shared reads and prefix reuse hold for every need."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams

    def recipe(self, params: BaseModel) -> Recipe:
        """How the written value combines the site's value and ``v`` (the value this kind ``needs``)."""
        raise NotImplementedError

    @classmethod
    def check_write(cls, params: BaseModel, width: int, vector: torch.Tensor | None) -> None:
        """Raise ValueError if ``params`` cannot work on a site ``width`` wide, or with ``vector`` (the
        document's tensor file, where the recipe needs one: ``[width]``, float32, finite): at compile time,
        before weights load, as a featurizer's ``check_site``. A write that would change nothing (a zero
        vector added) belongs here."""

    def apply(self, x: torch.Tensor, v: torch.Tensor | None, params: BaseModel) -> torch.Tensor:
        """Only for a recipe whose ``combine`` is ``custom``: the written value, ``[rows, window, width]``, for
        the site's value ``x`` (float32; a featurizer's features where the write goes through one) and the
        value ``v`` the recipe's need gives (float32, as wide, or None for ``nothing``; ``alpha`` is not
        applied). Row by row: a row's value depends on its own ``x`` and ``v`` alone, and the same inputs
        give the same bytes (``causalab_testing.InterventionConformance`` checks both). It runs where the
        engine runs (on an NDIF server too, its module shipped by value): torch and the standard library only."""
        raise NotImplementedError(f"intervention {self.name!r}: a `custom` recipe needs an `apply` method")


# -- metrics ------------------------------------------------------------------


@dataclass(frozen=True)
class MetricInputs:
    """What a metric sees of one run (the intervened one, or another its ``needs`` names), at each row's
    last token."""

    logits: torch.Tensor
    """``[rows, len(columns)]`` float32: the next-token logit of each column's token."""
    logsumexp: torch.Tensor
    """``[rows]`` float32: log-sum-exp over the whole vocabulary (for probabilities)."""
    columns: tuple[str, ...]
    token_ids: Mapping[str, Sequence[int]]
    """Each column's token id per row."""
    eligible: Sequence[bool]
    ranks: torch.Tensor | None = None
    """``[rows, len(columns)]`` int32, with the ``ranks`` view: how many tokens score above each column's."""
    logprobs: torch.Tensor | None = None
    """``[rows, vocab]`` float32, with the ``logprobs`` view: the whole next-token log-distribution."""
    runs: Mapping[str, MetricInputs] = field(default_factory=dict)
    """The other runs the metric needs, by role: ``base`` (the clean run of the scored input),
    ``counterfactual`` (the run of the input its writes take values from)."""

    def column(self, name: str) -> torch.Tensor:
        """``[rows]``: the logit of column ``name``'s answer token on each row."""
        return self.logits[:, self.columns.index(name)]

    def rank(self, name: str) -> torch.Tensor:
        """``[rows]``: how many tokens score above column ``name``'s answer token (``ranks`` view)."""
        return self.ranks[:, self.columns.index(name)]


@dataclass(frozen=True)
class MetricValues:
    """Per-row values (None where not eligible) and a summary."""

    rows: list[float | None]
    summary: dict[str, float | int | None]


RUNS = ("intervened", "base", "counterfactual")
"""The runs a metric may read: the one it scores, the clean run of that input, the counterfactual's run."""
VIEWS = ("answers", "ranks", "logprobs")
"""What of a run it may read: answer columns (always), their ranks over the vocabulary, the whole log-softmax."""


class Metric:
    """Scores one run from the answer columns' logits (and what else its ``needs`` names)."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    differentiable: ClassVar[bool] = False
    """True where the metric is a smooth function of the answer columns' logits and the log-sum-exp (view
    ``answers``) of the runs it reads: then a document may estimate it by attribution (``estimate``), which
    hands ``compute`` first-order estimates of those logits. An argmax or a rank is not (IIA, answer_rank)."""

    def linear(self, params: BaseModel) -> Mapping[str, float] | None:
        """Where the values depend on the intervened run's answer logits only through one linear combination of
        them (a logit difference: ``{target: 1, other: -1}``; a log-probability: ``{answer: 1, "logsumexp": -1}``),
        that combination (columns, and ``logsumexp``, to coefficients); None otherwise. An estimate for such
        metrics takes one backward per combination, not one per column (``Run.combinations``)."""
        return None

    def columns(self, params: BaseModel) -> tuple[str, ...]:
        """The data columns whose answer tokens this metric reads."""
        raise NotImplementedError

    def needs(self, params: BaseModel) -> Mapping[str, tuple[str, ...]]:
        """Which runs (``RUNS``) it reads, and which views (``VIEWS``) of each; engines bring home only these.
        A full-vocabulary view travels ``rows x vocab`` float32 per step: ask for it only when nothing smaller does."""
        return {"intervened": ("answers",)}

    def compute(self, params: BaseModel, inputs: MetricInputs) -> MetricValues:
        """Per-row values (None where a row is not eligible) and a summary, from the runs' scores."""
        raise NotImplementedError


def mean_over_eligible(values: Sequence[float], eligible: Sequence[bool]) -> MetricValues:
    """The usual summary: per-row values masked by eligibility, and their mean. A NaN value (a row the
    metric is undefined on) is kept in the rows, left out of the mean and counted as ``undefined`` (a key
    the summary has only where there is one)."""
    rows = [float(v) if ok else None for v, ok in zip(values, eligible)]
    kept = [v for v in rows if v is not None]
    defined = [v for v in kept if v == v]
    mean = sum(defined) / len(defined) if defined else None
    summary = {"mean": mean, "eligible": len(kept), "rows": len(rows)}
    if len(defined) < len(kept):
        summary["undefined"] = len(kept) - len(defined)
    return MetricValues(rows=rows, summary=summary)
