"""The plan: what an engine runs, as frozen plain data.

A plan holds only strings, integers, floats, booleans, tuples and dicts of
them, so it pickles, prints and diffs. Token positions are absolute indices
into a row's unpadded token sequence; engines add their own padding offsets.

There are two step kinds, closed:

- ``Run``: a forward pass of one input over every row, with reads (record
  activations), writes (swap recorded activations in) and an optional scoring
  (the next-token logits of the answer columns);
- ``Fit``: train a featurizer's parameters on training rows by interchange
  (source read -> featurized swap -> cross-entropy of the label), before the
  point's runs use it. Needs an engine with the ``training`` capability.

Plugins extend what fills a step (sites, featurizer kinds, metric kinds), not
the set of steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from collections.abc import Callable
from typing import Any, Literal

Rows = tuple  # a tuple with one entry per data row


@dataclass(frozen=True)
class ModelRef:
    """The checkpoint and the shape facts the compiler read from its shell."""

    key: str
    revision: str | None
    dtype: str
    source: str
    """Local directory the checkpoint was found in, on the compiling machine."""
    architecture: str
    layers_path: str
    """Dotted path of the list of blocks (e.g. ``model.layers``)."""
    layers: int
    width: int
    heads: int
    head_dim: int
    vocab: int
    sliding_window: int | None = None
    init_seed: int | None = None
    """Set where the document asks for random weights (``model.init: random``): their seed."""
    """Tokens a position attends back over in sliding-window attention (None: all of them)."""
    last_mlp: str | None = None
    """Dotted path of the last block's MLP where it works on each position alone and is handed no residual
    (None: none such): position reuse runs it on the last position only (``runtime.positions``)."""


@dataclass(frozen=True)
class Site:
    """A place in the model: a module, and which of its tensors is read or written."""

    component: str
    """One of the document's sites: block_input, block_output, attn_output, mlp_output, head."""
    layer: int
    module: str
    """Dotted path of the hooked module in the transformers model."""
    tensor: Literal["input", "output"]
    """The module's first positional input, or its output (first element if a tuple)."""
    width: int
    """Size of the last dimension read or written (head_dim for a head)."""
    head: int | None = None
    heads: int | None = None
    """For a head site: how many heads the tensor's last dimension splits into."""


@dataclass(frozen=True)
class Read:
    """Record the activation at ``site`` on each row's window."""

    name: str
    site: Site
    windows: Rows
    """Per row: a tuple of absolute token indices (empty where not eligible)."""


@dataclass(frozen=True)
class FeaturizerRef:
    """A featurizer a write goes through: the plugin kind and its parameters."""

    name: str
    kind: str
    params: dict[str, Any]
    state: bytes | None = None
    """A trained featurizer the document loads: the safetensors file's bytes, read once on the client.
    They travel with the plan, so an engine (or a server) never opens a client path."""
    state_digest: str | None = None
    """sha256 of ``state``, checked where the tensors are used and recorded in run.json."""
    over: FeaturizerRef | None = None
    """The featurizer whose features this one works on (a mask over an SAE's features): ``x`` goes through
    ``over`` first, and this one sees its features."""


@dataclass(frozen=True)
class InterventionRef:
    """What a write puts at its site other than the source's value (``contracts.Intervention``), lowered by the
    compiler to plain data: the value ``v`` it needs and how ``v`` combines with the site's value ``x``.

    needs: ``source`` (the source read on the row, or on ``rows[i]``), ``mean`` (the source read's mean over
    its eligible rows, less ``minus``'s), ``tensor`` (``tensor``'s one vector), ``noise`` (standard normal,
    drawn on the CPU from ``seed`` and the row), ``nothing``.
    combine: ``replace`` (v), ``add`` (x + alpha v), ``scale`` (alpha x), ``interpolate`` ((1 - alpha) x + alpha v),
    ``custom`` (the kind's ``apply``, its class handed to the engine).
    Through a featurizer, both are featurized and the result keeps ``x``'s error term."""

    kind: str
    params: dict[str, Any]
    needs: str
    combine: str
    alpha: float = 1.0
    minus: str | None = None
    """``mean``: a read whose mean is subtracted (a difference of means)."""
    rows: Rows | None = None
    """``source``: per row, the row whose source value it takes (a resample), drawn at compile time."""
    seed: int | None = None
    tensor: bytes | None = None
    """``tensor``: a safetensors file's bytes, read once on the client (as a trained featurizer's state)."""
    tensor_digest: str | None = None
    std_of: str | None = None
    """A read whose standard deviation over its rows multiplies ``alpha`` (noise's scale)."""


@dataclass(frozen=True)
class Write:
    """Put the value of read ``source`` into this run at ``site`` on each row's window (or what
    ``intervention`` computes; None: the swap, as before interventions existed)."""

    name: str
    source: str | None
    site: Site
    windows: Rows
    featurizer: FeaturizerRef | None = None
    intervention: InterventionRef | None = None


@dataclass(frozen=True)
class Sender:
    """A node of the computation graph (``ir.graph``) as an edge's sender: where its term in the residual stream
    is read. ``site``: a head's output before the output projection (``head``), an MLP's output, or the first
    block's input (the embeddings, node ``input``); a head's term is that times its columns of ``projection``'s
    weight, without the projection's bias (a constant no node owns)."""

    name: str
    site: Site
    projection: str | None = None


@dataclass(frozen=True)
class Receiver:
    """A node's input as an edge's receiver: the residual stream it reads, and where the engine puts the stream
    the patched edges give it.

    ``q``, ``k``, ``v``: the projection ``module``'s output, columns ``columns``, recomputed as the projection of
    ``norm`` (the block's first norm, whose input is the stream) applied to the patched stream; under grouped-query
    attention a key or value input is its group's. ``mlp``, ``logits``: the input of ``module``, the MLP's or the
    final norm, which is the stream itself."""

    name: str
    kind: Literal["q", "k", "v", "mlp", "logits"]
    layer: int
    """The block (the number of layers for the logits)."""
    module: str
    norm: str | None = None
    columns: tuple[int, int] | None = None


@dataclass(frozen=True)
class EdgePatch:
    """Patch edges of the computation graph in a run: each receiver reads the stream with its patched senders'
    terms taken from ``source`` (``edges.py`` in the runtime: a read per sender, every position of the source
    run), their mean over rows and positions (``mean``), or zero (``zero``).

    ``path``: path patching. The receivers read the written input's clean run's stream, with the sender's clean
    term replaced: the sender's effect through them alone, everything else frozen; what the receivers compute
    then flows on as usual. The engine runs the input clean first, for those streams."""

    name: str
    senders: tuple[Sender, ...]
    receivers: tuple[Receiver, ...]
    edges: tuple[tuple[int, int], ...]
    """(sender index, receiver index) pairs."""
    ablation: Literal["swap", "mean", "zero"] = "swap"
    reads: tuple[str, ...] = ()
    """Per sender: the read of the source run holding its term's input (empty for ``zero``)."""
    path: bool = False


@dataclass(frozen=True)
class Scoring:
    """Which next-token logits to bring back from a run (at each row's last token)."""

    columns: tuple[str, ...]
    token_ids: Rows
    """Per row: one token id per column."""
    views: tuple[str, ...] = ("answers",)
    """What comes back (``contracts.VIEWS``): the answer columns' logits and log-sum-exp always; ``ranks``, each
    column's rank over the vocabulary (reduced where the logits are); ``logprobs``, the whole distribution."""

    @property
    def scores(self) -> tuple[str, ...]:
        """What an estimate estimates, in this order: each answer column's logit, then the log-sum-exp. The
        order of ``Run.combinations``' coefficients and of ``runtime.attribution``'s gradients."""
        return (*self.columns, "logsumexp")


@dataclass(frozen=True)
class Run:
    """One forward pass of ``input`` over every row."""

    path: str
    """Unique step path, e.g. ``layers=0,pos=-4/base``; the key of its results."""
    input: str
    reads: tuple[Read, ...] = ()
    writes: tuple[Write, ...] = ()
    scoring: Scoring | None = None
    estimate: str | None = None
    """``attribution``: the engine does not run the writes; it estimates the scores they would give to first
    order, (written - clean) . d score / d activation, from one clean forward and backward of ``input``
    (``runtime.attribution``). The results are estimated scores, in the same keys as a run's."""
    edges: EdgePatch | None = None
    """Edges of the computation graph this run patches (a run that does cannot also write sites)."""
    estimate_steps: int | None = None
    """An estimate by integrated gradients: the gradient at each written site averaged over this many points
    on the path from its clean value to the written one (``runtime.attribution.path_groups``); None: one, the
    clean run's."""
    combinations: tuple[tuple[float, ...], ...] | None = None
    """An estimated run whose metrics read its scores only through these linear combinations (``Metric.linear``;
    coefficients of the answer columns, then the log-sum-exp): one backward each, instead of one per column
    and one for the log-sum-exp (None). The scores that come back are the least change that gives each
    combination its estimate."""
    kind: Literal["run"] = "run"

    @property
    def estimable(self) -> bool:
        """Whether a document's ``estimate`` estimates this run instead of running it: it writes or patches edges
        (edge attribution, ``runtime.edges.Probe``)."""
        return bool(self.writes) or self.edges is not None


@dataclass(frozen=True)
class Fit:
    """Train featurizer ``featurizer`` on training rows; runs of the same point then use it."""

    path: str
    featurizer: FeaturizerRef
    read: Read
    """The source read, with windows over the training rows."""
    write: Write
    """The write through the featurizer, with windows over the training rows."""
    source_input: str
    target_input: str
    prompts: dict[str, Rows]
    """Training rows' token ids for the source and target inputs."""
    labels: Rows
    """Per training row: the token id the intervened run should predict."""
    data_digest: str
    """sha256 of the training rows, recorded in the trained featurizer's identity."""
    epochs: int
    batch_size: int
    lr: float
    seed: int
    identity: dict[str, str] = field(default_factory=dict)
    """What the trained file must match to be loaded later: model, site, position, parameters (strings)."""
    kind: Literal["fit"] = "fit"


@dataclass(frozen=True)
class PositionRecord:
    """How one read's or write's position resolved on each row."""

    name: str
    role: Literal["read", "write"]
    input: str
    windows: Rows
    tokens: Rows
    """Per row: the decoded tokens of the window."""
    reasons: Rows
    """Per row: None, or why the position did not resolve (a reason code)."""


@dataclass(frozen=True)
class MetricPlan:
    """A metric to compute from one run's scoring."""

    name: str
    kind: str
    step: str
    """Path of the run whose scoring it reads (the ``intervened`` run)."""
    params: dict[str, Any]
    runs: dict[str, str] = field(default_factory=dict)
    """The other runs it reads, by role (``base``: the clean run of the scored input; ``counterfactual``:
    the run of the input its writes take their values from) -> step path."""


@dataclass(frozen=True)
class Point:
    """One sweep point (or the whole document when there is no sweep)."""

    name: str
    """Folder name such as ``layers=0,pos=-4``; empty without a sweep."""
    values: tuple[tuple[str, Any], ...]
    steps: tuple[Fit | Run, ...]
    metrics: tuple[MetricPlan, ...]
    positions: tuple[PositionRecord, ...]
    eligible: Rows
    document: dict[str, Any]
    """This point's document: sweep references replaced by their values."""

    def estimated(self, method: str, combinations: Callable[[Run], tuple | None], steps: int = 1) -> Point:
        """This point with each estimable run marked ``method`` (over ``steps`` path points), and its
        ``combinations(run)``."""
        return replace(self, steps=tuple(replace(s, estimate=method, combinations=combinations(s),
                                                 estimate_steps=steps if steps > 1 else None)
                                         if s.kind == "run" and s.estimable else s for s in self.steps))

    def patched(self) -> Point:
        """This point with its estimated runs run for real (``estimate.confirm``)."""
        return replace(self, steps=tuple(replace(s, estimate=None, combinations=None, estimate_steps=None)
                                         if s.kind == "run" else s
                                         for s in self.steps))


@dataclass(frozen=True, repr=False)
class Plan:
    """Everything an engine needs, and everything the client needs to fill results in."""

    model: ModelRef
    rows: int
    prompts: dict[str, Rows]
    """Per input: per row, the token ids of the prompt."""
    points: tuple[Point, ...]
    segments: dict[str, Rows] = field(default_factory=dict)
    """Per chat input: per row, each turn's token span ``{name: (start, stop)}``, rendered on the client."""
    requires: tuple[str, ...] = ()
    """Engine capabilities this plan needs (e.g. ``heads``)."""
    document: dict[str, Any] = field(default_factory=dict)
    resolvers: tuple[str, ...] = ()
    """The position resolvers that resolved this plan's positions (for provenance)."""
    data: dict[str, Any] = field(default_factory=dict)
    """Rows a causal model generated: the model, its provider, the spec, the rows' sha256 (run.json's ``data``)."""
    position_reuse: bool = False
    """Whether engines run this plan with position-level reuse, as the planner picked it
    (``causalab_core.compiler.reuse``; an engine's ``positions`` option overrides it)."""
    position_reuse_why: str = "not planned"
    """The planner's reason, in words (``causalab plan``, run.json's ``position_reuse``)."""

    def steps(self) -> list[Fit | Run]:
        return [step for point in self.points for step in point.steps]

    def __repr__(self) -> str:  # the dataclass's own would print every row's tokens
        return summary(self)

    def _repr_html_(self) -> str:
        """A notebook's view: the same lines, and the points with their eligible rows and steps."""
        import html

        points = "".join(f"<tr><td>{html.escape(p.name or '(document)')}</td><td>{sum(p.eligible)}/{len(p.eligible)}"
                         f"</td><td>{len(p.steps)}</td></tr>" for p in self.points[:50])
        more = f"<p>… {len(self.points) - 50} more points</p>" if len(self.points) > 50 else ""
        return (f"<pre>{html.escape(summary(self))}</pre><table><tr><th>point</th><th>eligible rows</th>"
                f"<th>steps</th></tr>{points}</table>{more}")

    def featurizers(self) -> list[FeaturizerRef]:
        """Every featurizer a write goes through (a Fit step's included), in plan order."""
        writes = [w for step in self.steps() for w in (step.writes if step.kind == "run" else (step.write,))]
        chains = [w.featurizer for w in writes if w.featurizer is not None]
        return [ref for chain in chains for ref in _chain(chain)]

    def interventions(self) -> list[InterventionRef]:
        """Every intervention other than the plain swap a write makes, in plan order."""
        return [w.intervention for step in self.steps() if step.kind == "run" for w in step.writes
                if w.intervention is not None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self, dict_factory=_plain_dict)


OPTIONAL = ("intervention", "init_seed", "estimate", "combinations", "edges", "estimate_steps")
"""Fields left out of a node's dict when absent: a plan that does not use them is the dict it was before they
existed (``resume.plan_digest`` and ``causalab plan --json`` read it)."""


def _plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: v for k, v in items if not (k in OPTIONAL and v is None)}


def head(plan: Any) -> list[str]:
    """The plan in a few lines: the model, the rows and inputs, the points and steps, position reuse, the metrics."""
    m = plan.model
    metrics = list(dict.fromkeys(f"{x.name} ({x.kind})" for point in plan.points for x in point.metrics))
    return [
        f"model  {m.key} (revision {m.revision or 'unpinned'}, {m.dtype}) from {m.source}",
        f"       {m.architecture}: {m.layers} layers, width {m.width}, {m.heads} heads of {m.head_dim}, vocab {m.vocab}",
        f"rows   {plan.rows}; inputs {', '.join(f'{k} ({max(len(p) for p in v)} tokens max)' for k, v in plan.prompts.items())}",
        f"points {len(plan.points)}; steps {len(plan.steps())}" + (f"; requires {', '.join(plan.requires)}" if plan.requires else ""),
        f"reuse  positions {'on' if plan.position_reuse else 'off'}: {plan.position_reuse_why}",
        f"scores {', '.join(metrics) or 'none'}",
    ]


def summary(plan: Any) -> str:
    """What a notebook shows of a plan: its name and ``head``."""
    name = plan.document.get("name") if isinstance(plan.document, dict) else None
    return "\n".join([f"<causalab Plan{' ' + repr(name) if name else ''}>", *("  " + line for line in head(plan))])


def _chain(ref: FeaturizerRef) -> list[FeaturizerRef]:
    """A featurizer and those it works over, outermost first."""
    return [ref, *(_chain(ref.over) if ref.over is not None else ())]
