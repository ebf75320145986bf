"""The experiment document, version 2: a pydantic schema of plain JSON.

Names (inputs, reads, writes, metrics, featurizers, sweep axes) are chosen by
the author and referenced by name; component kinds (metric ``kind``, position
forms, featurizer ``kind``) are supplied by plugins and checked against the
installed registry in :mod:`causalab_core.document.check`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from causalab_core.document.fields import (  # re-exported: the schema's names are imported from here
    MAX_ROWS, NAME_PATTERN, SITES, SWEEPABLE, Frozen, Head, Labels, Layer, Name, OptionalKeys, Position, Refusing,
    Seed, SiteName, SweepRef, _sweepable, is_sweep_ref,
)

__all__ = ["MAX_ROWS", "NAME_PATTERN", "SITES", "SWEEPABLE", "SweepRef", "is_sweep_ref"]  # and the models below
from causalab_core.document.given import frame_rows, is_frame



class ModelSpec(OptionalKeys):
    """Which checkpoint to run, and at which dtype."""

    OPTIONAL = ("init", "init_seed")

    key: str = Field(min_length=1, description="A model key: a local directory, a Hugging Face id in the local cache, or a key a models plugin knows.")
    revision: str | None = Field(None, description="Pinned revision (commit or checkpoint digest); checked where the source reports one.")
    dtype: Literal["float32", "float16", "bfloat16"] = Field("float32", description="The dtype the weights run in.")
    init: Literal["trained", "random"] = Field(
        "trained", description="\"random\": the checkpoint's architecture with freshly initialized weights (from "
        "`init_seed`), the baseline a finding on trained weights must beat; local engines only.")
    init_seed: int = Field(0, ge=0, lt=2**31, description="Seeds the random weights of `init: random`.")


class CausalModelSpec(Refusing):
    """Rows generated from a causal model plugin; its other keys are that model's parameters."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name = Field(description="The causal model (a plugin's, e.g. `weekdays`); its other keys are its parameters.")
    intervene: list[Name] = Field(min_length=1, description="Input variables the counterfactual changes (each differs from the base's).")
    rows: Annotated[int, Field(ge=1, le=MAX_ROWS)] | Literal["all"] = Field(
        description="How many distinct rows to sample, or \"all\": every pair of the split the model can enumerate "
        "(its inputs' `domain`), in a fixed order, so that a figure is the population's, not a sample's.")
    cap: int = Field(5000, ge=1, le=MAX_ROWS, description="With rows \"all\": the most rows the population may have "
                                                         "(a larger one is refused, naming its size).")
    split: Literal["train", "test"] = Field(description="Which of the model's splits the rows come from.")
    seed: int = Field(0, description="Seeds the sample of rows (rows \"all\" uses none).")
    labels: list[list[Name]] = Field([], description="Interventions on sets of variables, beyond the single ones: "
                                     "[\"count\", \"day\"] adds `label_count+day`, the answer when the base run takes "
                                     "both from the counterfactual run.")
    distinct_labels: list[str] = Field([], description="Keep only rows where these labels (a variable, or a set of "
                                       "`labels` joined by `+`) and the base answer all differ: rows on which the "
                                       "hypotheses predict different answers.")

    @model_serializer(mode="wrap")
    def _default_cap(self, handler):
        """The cap only where it was changed: a sampled document's plan keeps the bytes it had before populations."""
        data = handler(self)
        if isinstance(data, dict) and self.cap == type(self).model_fields["cap"].default:
            data.pop("cap", None)
        return data


class DataSpec(Frozen):
    """Rows inline, a JSONL file (one JSON object per line), or generated from a causal model."""

    rows: list[dict[str, Any]] | None = Field(None, max_length=MAX_ROWS,
                                              description="Inline rows: each maps column names to values.")
    path: str | None = Field(None, description="A JSONL file, relative to --data-root or else to the document's folder.")
    causal_model: CausalModelSpec | None = Field(None, description="Generate the rows: base, counterfactual, answers, "
                                                 "each variable's value (var_<variable> where its name would take one of those "
                                                 "columns, as `answer` would) and label_<variable> for each intervention.")

    @field_validator("rows", mode="before")
    @classmethod
    def _frame(cls, value: Any) -> Any:
        """A pandas DataFrame given from Python: its rows."""
        return frame_rows(value) if is_frame(value) else value

    @model_validator(mode="after")
    def _exactly_one(self) -> DataSpec:
        if sum(x is not None for x in (self.rows, self.path, self.causal_model)) != 1:
            raise PydanticCustomError("data", "give exactly one of `rows`, `path` or `causal_model`")
        return self


class ReadSpec(OptionalKeys):
    """Record an activation of one input's run, at a layer, site and position."""

    OPTIONAL = ("where",)

    input: Name = Field(description="Which input's run the activation comes from (`donor` or `recipient` under "
                                    "`direction`); where writes change that input, its intervened run.")
    layer: Layer = Field(description="The layer (0 is the first block; `block_input` of layer 0 is the token embeddings), or {\"sweep\": axis}.")
    site: SiteName = Field("block_output", description="Where in the layer: block_input, block_output, attn_output, mlp_output, or head (with `head`); or {\"sweep\": axis}.")
    position: Position = Field(description="Which token: an index (negative counts from the end), an object a position plugin resolves (e.g. {\"variable\": \"entity\"}), or {\"sweep\": axis}.")
    head: Head | None = Field(None, description="Attention head, for site `head` only.")
    where: dict[Name, str] | None = Field(
        None, description="Only rows whose columns hold these values, e.g. {\"day\": \"Monday\"}: the rows a mean "
        "or a standard deviation is taken over (other rows: reason `row_excluded`).")


class InterventionSpec(Refusing):
    """What the write puts at its site: an intervention of a plugin-provided `kind`; its other keys are that
    kind's parameters (a `{"sweep": axis}` reference may take a parameter's value)."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name = Field(description="The intervention: swap, zero, mean, resample, noise, add, or a plugin's.")


class WriteSpec(OptionalKeys):
    """Swap a read's value into another input's run, at a layer, site and position (or intervene otherwise)."""

    OPTIONAL = ("intervention",)

    input: Name = Field(description="Which input's run is intervened on (`recipient` or `donor` under `direction`).")
    source: Name | None = Field(None, description="The read whose value is written (the intervention's source; "
                                                  "a swap, resample, mean or difference of means needs one).")
    layer: Layer = Field(description="The layer (0 is the first block; `block_input` of layer 0 is the token embeddings), or {\"sweep\": axis}.")
    site: SiteName = Field("block_output", description="Where in the layer: block_input, block_output, attn_output, mlp_output, or head (with `head`); or {\"sweep\": axis}.")
    position: Position = Field(description="Which token: an index (negative counts from the end), an object a position plugin resolves (e.g. {\"variable\": \"entity\"}), or {\"sweep\": axis}.")
    head: Head | None = Field(None, description="Attention head, for site `head` only.")
    featurizer: Name | None = Field(None, description="A featurizer declared under `featurizers`; none swaps the whole vector.")
    intervention: InterventionSpec | None = Field(
        None, description="What the write does (`kind`: swap, zero, mean, resample, noise, add, or a plugin's); "
        "none swaps the source's value in.")



def _is_edges(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(e, list) and len(e) == 2 and all(isinstance(n, str) for n in e) for e in value)


SWEEPABLE["edges"] = ("a list of [sender, receiver] pairs of node names", _is_edges)
Edges = _sweepable("a list of [sender, receiver] pairs of node names, or \"each\"",
                   lambda v: v == "each" or _is_edges(v), {"anyOf": [{"const": "each"}, {
                       "type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2,
                                                  "items": {"type": "string"}}}]})


class PathSpec(Frozen):
    """Path patching (Wang et al. 2022): a sender's effect through these receivers only."""

    sender: str = Field(description="A node: `input`, a head `a{layer}.h{head}`, an MLP `m{layer}`.")
    receivers: list[str] = Field(min_length=1, description="Node inputs after it: `a{layer}.h{head}<q|k|v>` "
                                 "(`a{layer}.kv{group}<k|v>` under grouped-query attention), `m{layer}`, `logits`.")


class EdgePatchSpec(OptionalKeys):
    """Patch edges of the model's computation graph (``causalab graph``) in one input's run."""

    OPTIONAL = ("edges", "path", "source", "intervention")

    input: Name = Field(description="Which input's run is patched (`recipient` under `direction`).")
    source: Name | None = Field(None, description="The input whose run gives the senders' patched terms (every "
                                "position; its prompts as long as the patched input's), for a swap or a mean.")
    edges: Edges | None = Field(None, description="[sender, receiver] pairs, e.g. [[\"a0.h1\", \"a1.h2<k>\"]] (an "
                                "empty list patches nothing), {\"sweep\": axis} over lists of them, or \"each\": "
                                "one sweep point per edge of the graph (axis `edge`), each edge patched alone.")
    path: PathSpec | None = Field(None, description="Instead of `edges`: path patching, the sender's effect "
                                  "through the receivers alone, everything else frozen at the input's clean run.")
    intervention: InterventionSpec | None = Field(None, description="`swap` (default: the source run's terms), "
                                                  "`mean` (the source run's mean over rows and positions) or `zero`.")

    @model_validator(mode="after")
    def _one_of(self):
        if (self.edges is None) == (self.path is None):
            raise ValueError("give `edges` or `path`, one of them")
        return self


class SelectSpec(OptionalKeys):
    """How a circuit is chosen from the edge scores: one of ``top``, ``connected``, ``acdc``."""

    OPTIONAL = ("top", "connected", "acdc", "edges")

    top: int | None = Field(None, ge=1, description="The k edges whose patch moves the metric most.")
    connected: int | None = Field(None, ge=1, description="k edges chosen greedily from the logits back, each "
                                  "the best-scored edge into a node already in the circuit, then pruned to "
                                  "what the input reaches (as EAP-IG does).")
    acdc: float | None = Field(None, gt=0, description="ACDC's threshold (Conmy et al. 2023): from the logits back, "
                               "each edge is patched for real and stays out while the metric moves less than this.")
    edges: list[tuple[str, str]] | None = Field(None, min_length=1, description="A circuit of your own, "
                                                "[[sender, receiver], ...]: its faithfulness, beside the scores.")

    @model_validator(mode="after")
    def _one(self):
        if sum(v is not None for v in (self.top, self.connected, self.acdc, self.edges)) != 1:
            raise ValueError("give one of `top`, `connected`, `acdc`, `edges`")
        return self


class CircuitSpec(OptionalKeys):
    """Find a circuit from the sweep's edge scores (``edges: "each"``), and its faithfulness curve."""

    OPTIONAL = ("metric", "curve")

    patch: Name = Field(description="The $.edges entry whose `edges` is \"each\": its points score the edges.")
    metric: Name | None = Field(None, description="The metric that scores them (default: the first).")
    select: SelectSpec = Field(description="How the circuit is chosen from the scores.")
    curve: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=1, description="Circuit sizes (edges kept) on the faithfulness curve; default 0, 1, 2, 4, "
        "... and every edge.")


class TrainSpec(OptionalKeys):
    """Fit a featurizer's parameters before it is used: cross-entropy of ``label`` through the intervened model."""

    OPTIONAL = ("labels", "label")

    data: DataSpec = Field(description="Training rows (same columns as the document's data), e.g. the train split.")
    label: str | None = Field(None, description="Answer column the intervened run should predict (usually the "
                              "counterfactual's); a featurizer fitted from activations (`pca`) reads none.")
    epochs: int = Field(3, ge=1, description="Passes over the training rows.")
    batch_size: int = Field(32, ge=1, description="Training rows per optimizer step.")
    lr: float = Field(1e-2, gt=0, description="The optimizer's learning rate (Adam).")
    seed: Seed = Field(0, description="Seeds the initial parameters and the order of the rows; sweep it to see training's spread.")
    labels: Labels = Field("as_given", description="\"shuffled\" trains on the labels permuted among the training "
                           "rows (from `seed`): the control a trained subspace must beat, with the same data, rank and "
                           "steps; sweep it (`[\"as_given\", \"shuffled\"]`) to run both side by side.")


class FeaturizerSpec(OptionalKeys):
    """A featurizer of a plugin-provided `kind`; its other keys are that kind's parameters."""

    OPTIONAL = ("over",)

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name = Field(description="The featurizer (a plugin's, e.g. `das`); its other keys are its parameters.")
    train: TrainSpec | None = Field(None, description="Fit the featurizer on these rows first (engines with `training`).")
    over: Name | None = Field(None, description="Another featurizer of this document whose features this one works "
                              "on (a `mask` over an `sae`'s features); that one is used as it is, not trained here.")


class MetricSpec(Refusing):
    """A metric of a plugin-provided `kind`; its other keys are that kind's parameters."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name = Field(description="The metric (a plugin's: iia, logit_diff, p_answer...); its other keys are its parameters.")
    input: Name | None = Field(None, description="Whose run is scored; by default the input the writes intervene on.")


class ConfirmSpec(Frozen):
    """Real patching of the points whose estimated effect is largest."""

    top: int = Field(ge=1, le=10_000, description="How many points to patch for real: those whose estimated mean "
                     "moves furthest from the clean run's.")
    metric: Name | None = Field(None, description="The metric that ranks the points (default: the first).")


class EstimateSpec(Frozen):
    """Estimate each point's writes instead of running them (attribution patching, Nanda 2023; Kramar et al. 2024):
    the first-order change of the scores, (written - clean) . d score / d activation, from one clean forward and
    one backward per answer column of each input, for every point at once."""

    method: Literal["attribution"] = Field(description="How the writes are estimated.")
    steps: int = Field(1, ge=1, le=256, description="Integrated gradients (Sundararajan et al. 2017): the "
                       "gradient averaged over this many points on the straight path from the clean value at each "
                       "written site to the written one (left Riemann sum: 1 is the plain estimate at the clean "
                       "run). Costs steps - 1 more forward-backward passes per written site.")
    confirm: ConfirmSpec | None = Field(None, description="Then patch the top points for real and report how well "
                                        "the estimate agrees with patching on them.")


ROLES = ("recipient", "donor")
"""Input names a read, write or metric may use under ``direction``."""


class DirectionSpec(Frozen):
    """Which way activation patching runs (Heimersheim & Nanda 2024): ``denoising`` patches the clean input's
    activations into the corrupted input's run (is the site sufficient?), ``noising`` the corrupted input's
    into the clean one's (is it necessary?). Reads, writes and metrics name the inputs by role: ``donor``
    (where patched values come from) and ``recipient`` (the run they go into)."""

    patch: Literal["denoising", "noising"] = Field(description="denoising: clean into corrupted; noising: corrupted into clean.")
    clean: Name = Field(description="The input that gives the answer under study.")
    corrupted: Name = Field(description="The input that does not (another prompt, or one a noise write corrupts).")

    def roles(self) -> dict[str, str]:
        """``{role: input}`` for this direction."""
        if self.patch == "denoising":
            return {"recipient": self.corrupted, "donor": self.clean}
        return {"recipient": self.clean, "donor": self.corrupted}


def with_roles(data: Any) -> Any:
    """The raw document with each read's, write's and metric's ``input`` role replaced by the input its
    ``direction`` gives it (a metric without ``input`` scores the recipient); ``data`` unchanged without one."""
    if not isinstance(data, dict) or not isinstance(data.get("direction"), dict):
        return data
    direction = data["direction"]
    patch, clean, corrupted = (direction.get(k) for k in ("patch", "clean", "corrupted"))
    if patch not in ("denoising", "noising") or not isinstance(clean, str) or not isinstance(corrupted, str):
        return data  # the schema says what is wrong with it
    roles = DirectionSpec.model_construct(patch=patch, clean=clean, corrupted=corrupted).roles()
    out = dict(data)
    for group in ("reads", "writes", "metrics", "edges"):
        specs = data.get(group)
        if not isinstance(specs, dict):
            continue
        out[group] = {}
        for name, spec in specs.items():
            if isinstance(spec, dict) and group == "metrics" and "input" not in spec:
                spec = {**spec, "input": roles["recipient"]}
            for key in ("input", "source") if group == "edges" else ("input",):
                if isinstance(spec, dict) and isinstance(spec.get(key), str) and spec[key] in roles:
                    spec = {**spec, key: roles[spec[key]]}
            out[group][name] = spec
    return out


class Document(OptionalKeys):
    """An interchange-intervention experiment."""

    OPTIONAL = ("columns", "direction", "estimate", "edges", "circuit")

    version: Literal["2"] = Field(description="The document format's version: \"2\".")
    name: str | None = Field(None, description="A short name: the report's and the plots' title.")
    description: str | None = Field(None, description="What the experiment asks, in words.")
    model: ModelSpec = Field(description="The checkpoint to run.")
    data: DataSpec = Field(description="The rows: prompt columns, answer columns, and any others the document names.")
    inputs: list[Name] = Field(["base", "counterfactual"], min_length=1, description="Prompt columns; each is run through the model.")
    columns: dict[Name, Name] = Field(
        {}, description="Per input, the column its prompt comes from where that is not the column of its name: "
        "{\"noised\": \"base\"} runs the base prompt a second time, as its own input (a run to corrupt).")
    direction: DirectionSpec | None = Field(
        None, description="Activation patching's direction, denoising or noising, and which inputs are the clean "
        "and the corrupted one; reads, writes and metrics then name inputs by role (`donor`, `recipient`).")
    variables: dict[Name, dict[Name, str]] = Field(
        {}, description="Per input, prompt variables that take their value from another column, e.g. "
        "{\"counterfactual\": {\"entity\": \"cf_entity\"}}; otherwise a variable is the column of its name."
    )
    reads: dict[Name, ReadSpec] = Field({}, description="Activations to record, by name: the sources of writes.")
    writes: dict[Name, WriteSpec] = Field({}, description="Interventions, by name: what is put where in which run.")
    edges: dict[Name, EdgePatchSpec] = Field({}, description="Edge and path patches of the model's computation "
                                             "graph, by name: which edges a run reads from another run (or a mean, "
                                             "or zero).")
    featurizers: dict[Name, FeaturizerSpec] = Field({}, description="Bases a write may act in (DAS...), by name.")
    metrics: dict[Name, MetricSpec] = Field({}, description="What is scored, by name: each gives `<name>.json` per point.")
    sweep: dict[Name, Annotated[list[Any], Field(min_length=1)]] = Field(
        {}, description="Axes: each maps to the values its `{\"sweep\": axis}` references take; points are the product, in axis order."
    )

    estimate: EstimateSpec | None = Field(
        None, description="Estimate the writes by attribution patching instead of running them (metrics with a "
        "gradient only); `confirm` patches the top points for real.")
    circuit: CircuitSpec | None = Field(
        None, description="Choose a circuit from the edge scores of `edges: \"each\"`, and measure its faithfulness "
        "(circuit.json, faithfulness.json).")

    @model_validator(mode="before")
    @classmethod
    def _roles(cls, data: Any) -> Any:
        return with_roles(data)


def json_schema() -> dict[str, Any]:
    schema = Document.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "causalab document (version 2)"
    return schema
