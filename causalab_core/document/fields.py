"""The schema's building blocks: names, models that refuse bad fields in one line, fields a sweep may fill.

A ``{"sweep": axis}`` reference may stand for a layer, a head, a position, a seed, labels, a site or edges.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, WithJsonSchema, model_serializer
from pydantic_core import PydanticCustomError

from causalab_core.document.messages import validation_message
from causalab_core.errors import DocumentError

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
MAX_ROWS = 100_000
"""The most rows a document's data may hold, however given: a run keeps every row's prompts, windows and values
in memory (about 10 KiB a row to validate, 40 to 110 to run a point on the toy models: docs/guides.md, "Data at
scale"), so more is refused before any row is parsed."""
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
"""A name an author chooses; metric and featurizer names become file names, so they stay short."""

SITES = ("block_input", "block_output", "attn_output", "mlp_output", "head")
"""Where in a layer a read or write lands. ``head`` needs ``head`` set (one attention head's output, before the output projection)."""


_VALIDATING = ContextVar("validating", default=False)
"""Whether a model's validation is already under way: pydantic calls a nested model's ``__init__`` too."""


class Refusing(BaseModel):
    """A model built in Python (``ModelSpec(key=3)``) refuses bad fields in one line, as a file does: a
    ``DocumentError`` naming the model and the field's ``$.path``, not pydantic's multi-line error. Inside
    another model's validation it raises pydantic's error, which the outer one places (``$.writes.w.layer``)."""

    def __init__(self, **data: Any) -> None:
        if _VALIDATING.get():
            super().__init__(**data)
            return
        token = _VALIDATING.set(True)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise DocumentError(validation_message(type(self).__name__, exc, data)) from None
        finally:
            _VALIDATING.reset(token)

    @classmethod
    def model_validate(cls, *args: Any, **kwargs: Any) -> Any:
        """pydantic's, with the nested models' errors left to it to place (see the class)."""
        token = _VALIDATING.set(True)
        try:
            return super().model_validate(*args, **kwargs)
        finally:
            _VALIDATING.reset(token)


class Frozen(Refusing):
    # No float of a document is NaN or infinite (load.not_finite refuses them in the raw JSON first, extra
    # keys and sweep values included); the models hold that too, for a document built in Python.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class OptionalKeys(Frozen):
    """A model whose ``OPTIONAL`` keys, left at their default, are not dumped: a document that does not use a
    later feature (an intervention, a row filter, a direction, a label control) dumps as it did before the
    feature existed, so its plan's copy of the document, and the plan's bytes and digest, stay the same."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _absent_optional(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            for key in self.OPTIONAL:
                if getattr(self, key) == type(self).model_fields[key].default:
                    data.pop(key, None)
        return data


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
    "labels": ("\"as_given\" or \"shuffled\"", lambda v: v in ("as_given", "shuffled")),
    "site": (f"a site ({', '.join(SITES)})", lambda v: v in SITES),
}
"""What a swept value of each field must be: checked like a literal one (document.check)."""

Layer = _sweepable(*SWEEPABLE["layer"], {"type": "integer", "minimum": 0})
Head = _sweepable(*SWEEPABLE["head"], {"type": "integer", "minimum": 0})
Position = _sweepable(*SWEEPABLE["position"], {"anyOf": [{"type": "integer"}, {"type": "object"}]})
Seed = _sweepable(*SWEEPABLE["seed"], {"type": "integer"})
Labels = _sweepable(*SWEEPABLE["labels"], {"enum": ["as_given", "shuffled"]})
SiteName = _sweepable(*SWEEPABLE["site"], {"enum": list(SITES)})
