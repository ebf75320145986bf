"""The experiment document, version 2: a pydantic schema of plain JSON.

Names (inputs, reads, writes, metrics, featurizers, sweep axes) are chosen by
the author and referenced by name; component kinds (metric ``kind``, position
forms, featurizer ``kind``) are supplied by plugins and checked against the
installed registry in :mod:`causalab_core.document.check`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
"""A name an author chooses; metric and featurizer names become file names, so they stay short."""

SITES = ("block_input", "block_output", "attn_output", "mlp_output", "head")
"""Where in a layer a read or write lands. ``head`` needs ``head`` set (one attention head's output, before the output projection)."""


class Frozen(BaseModel):
    # No float of a document is NaN or infinite (load.not_finite refuses them in the raw JSON first, extra
    # keys and sweep values included); the models hold that too, for a document built in Python.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class SweepRef(Frozen):
    """A value taken from the named sweep axis, one point at a time."""

    sweep: Name


def is_sweep_ref(value: Any) -> bool:
    """``{"sweep": "<axis>"}``: a value taken from a sweep axis."""
    return isinstance(value, dict) and set(value) == {"sweep"} and isinstance(value["sweep"], str)


def _sweepable(kind: str, check, schema: dict[str, Any]):
    """A field that holds a value of ``kind`` or a ``{"sweep": axis}`` reference."""

    def validate(value: Any) -> Any:
        if isinstance(value, SweepRef):
            return value
        if isinstance(value, dict) and set(value) == {"sweep"}:
            return SweepRef.model_validate(value)
        if check(value):
            return value
        raise PydanticCustomError(
            "sweepable", "expected {kind} or {ref}, got {got}",
            {"kind": kind, "ref": '{"sweep": "<axis>"}', "got": repr(value)},
        )

    ref = {"type": "object", "properties": {"sweep": {"type": "string"}}, "required": ["sweep"],
           "additionalProperties": False}
    return Annotated[Any, PlainValidator(validate), WithJsonSchema({"anyOf": [schema, ref]})]


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_position(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, dict)


SWEEPABLE = {
    "layer": ("a layer number (0 or more)", _is_index),
    "head": ("a head number (0 or more)", _is_index),
    "position": ("a position (an integer, negative counts from the end, or an object a position plugin accepts)",
                 _is_position),
    "seed": ("a seed (an integer)", lambda v: isinstance(v, int) and not isinstance(v, bool)),
}
"""What a swept value of each field must be: checked like a literal one (document.check)."""

Layer = _sweepable(*SWEEPABLE["layer"], {"type": "integer", "minimum": 0})
Head = _sweepable(*SWEEPABLE["head"], {"type": "integer", "minimum": 0})
Position = _sweepable(*SWEEPABLE["position"], {"anyOf": [{"type": "integer"}, {"type": "object"}]})
Seed = _sweepable(*SWEEPABLE["seed"], {"type": "integer"})


class ModelSpec(Frozen):
    """Which checkpoint to run, and at which dtype."""

    key: str = Field(min_length=1, description="A model key: a local directory, a Hugging Face id in the local cache, or a key a models plugin knows.")
    revision: str | None = Field(None, description="Pinned revision (commit or checkpoint digest); checked where the source reports one.")
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"


class CausalModelSpec(BaseModel):
    """Rows generated from a causal model plugin; its other keys are that model's parameters."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name
    intervene: list[Name] = Field(min_length=1, description="Input variables the counterfactual changes (each differs from the base's).")
    rows: int = Field(ge=1, le=100_000)
    split: Literal["train", "test"]
    seed: int = 0
    labels: list[list[Name]] = Field([], description="Interventions on sets of variables, beyond the single ones: "
                                     "[\"count\", \"day\"] adds `label_count+day`, the answer when the base run takes "
                                     "both from the counterfactual run.")
    distinct_labels: list[str] = Field([], description="Keep only rows where these labels (a variable, or a set of "
                                       "`labels` joined by `+`) and the base answer all differ: rows on which the "
                                       "hypotheses predict different answers.")


class DataSpec(Frozen):
    """Rows inline, a JSONL file (one JSON object per line), or generated from a causal model."""

    rows: list[dict[str, Any]] | None = Field(None, description="Inline rows: each maps column names to values.")
    path: str | None = Field(None, description="A JSONL file, relative to --data-root or else to the document's folder.")
    causal_model: CausalModelSpec | None = Field(None, description="Generate the rows: base, counterfactual, answers, "
                                                 "each variable's value (var_<variable> where its name would take one of those "
                                                 "columns, as `answer` would) and label_<variable> for each intervention.")

    @model_validator(mode="after")
    def _exactly_one(self) -> DataSpec:
        if sum(x is not None for x in (self.rows, self.path, self.causal_model)) != 1:
            raise PydanticCustomError("data", "give exactly one of `rows`, `path` or `causal_model`")
        return self


class ReadSpec(Frozen):
    """Record an activation of one input's run, at a layer, site and position."""

    input: Name = Field(description="Which input (prompt column) the activation comes from.")
    layer: Layer
    site: Literal[SITES] = "block_output"
    position: Position
    head: Head | None = Field(None, description="Attention head, for site `head` only.")


class InterventionSpec(BaseModel):
    """What the write puts at its site: an intervention of a plugin-provided `kind`; its other keys are that
    kind's parameters (a `{"sweep": axis}` reference may take a parameter's value)."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name


class WriteSpec(Frozen):
    """Swap a read's value into another input's run, at a layer, site and position (or intervene otherwise)."""

    input: Name = Field(description="Which input's run is intervened on.")
    source: Name | None = Field(None, description="The read whose value is written (the intervention's source; "
                                                  "a swap, resample, mean or difference of means needs one).")
    layer: Layer
    site: Literal[SITES] = "block_output"
    position: Position
    head: Head | None = None
    featurizer: Name | None = Field(None, description="A featurizer declared under `featurizers`; none swaps the whole vector.")
    intervention: InterventionSpec | None = Field(
        None, description="What the write does (`kind`: swap, zero, mean, resample, noise, add, or a plugin's); "
        "none swaps the source's value in.")

    @model_serializer(mode="wrap")
    def _absent_intervention(self, handler):
        """A write without an intervention dumps as it did before interventions existed (the plan's copy of
        the document, and so its bytes, stay the same)."""
        data = handler(self)
        if self.intervention is None and isinstance(data, dict):
            data.pop("intervention", None)
        return data


class TrainSpec(Frozen):
    """Fit a featurizer's parameters before it is used: cross-entropy of ``label`` through the intervened model."""

    data: DataSpec = Field(description="Training rows (same columns as the document's data), e.g. the train split.")
    label: str = Field(description="Answer column the intervened run should predict (usually the counterfactual's).")
    epochs: int = Field(3, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(1e-2, gt=0)
    seed: Seed = Field(0, description="Seeds the initial parameters and the order of the rows; sweep it to see training's spread.")


class FeaturizerSpec(BaseModel):
    """A featurizer of a plugin-provided `kind`; its other keys are that kind's parameters."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name
    train: TrainSpec | None = Field(None, description="Fit the featurizer on these rows first (engines with `training`).")


class MetricSpec(BaseModel):
    """A metric of a plugin-provided `kind`; its other keys are that kind's parameters."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    kind: Name
    input: Name | None = Field(None, description="Whose run is scored; by default the input the writes intervene on.")


class Document(Frozen):
    """An interchange-intervention experiment."""

    version: Literal["2"]
    name: str | None = None
    description: str | None = None
    model: ModelSpec
    data: DataSpec
    inputs: list[Name] = Field(["base", "counterfactual"], min_length=1, description="Prompt columns; each is run through the model.")
    variables: dict[Name, dict[Name, str]] = Field(
        {}, description="Per input, prompt variables that take their value from another column, e.g. "
        "{\"counterfactual\": {\"entity\": \"cf_entity\"}}; otherwise a variable is the column of its name."
    )
    reads: dict[Name, ReadSpec] = {}
    writes: dict[Name, WriteSpec] = {}
    featurizers: dict[Name, FeaturizerSpec] = {}
    metrics: dict[Name, MetricSpec] = {}
    sweep: dict[Name, Annotated[list[Any], Field(min_length=1)]] = Field(
        {}, description="Axes: each maps to the values its `{\"sweep\": axis}` references take; points are the product, in axis order."
    )


def json_schema() -> dict[str, Any]:
    schema = Document.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "causalab document (version 2)"
    return schema
