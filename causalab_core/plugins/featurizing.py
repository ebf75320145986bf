"""What a featurizer looks like: the basis a write's variable is looked for in (see ``contracts``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import torch


class NoParams(BaseModel):
    """A component that takes no parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Featurizer:
    """``featurize(x) -> (f, err)`` and ``inverse(f, err) -> x``, in float32.

    A trainable featurizer (``trainable = True``) is also a ``torch.nn.Module``. How a document's ``train``
    fits it is ``fits``: by ``interchange`` (an engine optimizes its ``parameters()`` with Adam on the
    cross-entropy of the label through the swap, plus its ``penalty()``, calling ``anneal`` before each step)
    or from the site's ``activations`` (one pass over the training rows under ``torch.no_grad()``, in which
    ``featurize`` sees every activation the swap featurizes, then ``settle()``). ``state()`` is what gets
    saved (safetensors) and ``load_state`` puts it back; a state's ``units`` tensor (the indices of the
    features it keeps) is written into the file's header as ``units`` and ``size``.
    """

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    trainable: ClassVar[bool] = False
    fits: ClassVar[Literal["interchange", "activations"]] = "interchange"
    needs_fit: ClassVar[bool] = False
    """Untrained and unloaded it changes nothing (a mask keeping no unit): a document must give it ``train`` or
    ``load`` (implied where ``fits`` is ``activations``)."""
    paths: ClassVar[tuple[str, ...]] = ()
    """Parameters that name a file or folder (relative to the document's data folder) that ``read_files``
    reads on the client: the compiler carries what it read in the plan, never the path."""

    def __init__(self, params: BaseModel, width: int):
        self.params = params
        self.width = width

    @classmethod
    def check_site(cls, params: BaseModel, width: int) -> None:
        """Raise ValueError if ``params`` cannot work on a site ``width`` wide (compile time, no weights)."""

    @classmethod
    def has_units(cls, params: BaseModel) -> bool:
        """Whether the features are a fixed set of units another featurizer may work over (a mask over an
        SAE's features); False (the default) where they are not (a mask's own, a learned boundary's)."""
        return False

    @classmethod
    def check_training(cls, params: BaseModel, width: int, rows: int, activations: int) -> None:
        """Raise ValueError if ``rows`` training rows (``activations`` site vectors, the windows of both
        inputs) are too few to fit ``params`` (compile time)."""

    @classmethod
    def read_files(cls, params: BaseModel, width: int) -> dict[str, torch.Tensor] | None:
        """The tensors of the files ``paths`` name (already made absolute), read at compile time on the client,
        or None: they travel in the plan and reach ``load_state``. Raise ValueError for a file this kind
        cannot use (a missing field, another width)."""
        return None

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``[..., width]`` activations -> their features, and what the features leave out (None where nothing)."""
        raise NotImplementedError

    def inverse(self, f: torch.Tensor, err: Any) -> torch.Tensor:
        """Features (and what they left out) -> activations: ``inverse(*featurize(x))`` gives ``x`` back."""
        raise NotImplementedError

    def anneal(self, step: int, steps: int) -> None:
        """Before optimizer step ``step`` of ``steps`` (an ``interchange`` fit): a temperature's schedule."""

    def penalty(self) -> torch.Tensor | None:
        """A term added to the training loss (a sparsity cost), or None."""
        return None

    def settle(self) -> None:
        """After an ``activations`` fit's pass: compute the state from what ``featurize`` saw."""

    def state(self) -> dict[str, torch.Tensor]:
        """The tensors that define this featurizer (empty for a parameter-free one)."""
        return {}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Put back what ``state`` returned (a trained file's tensors)."""
        if tensors:
            raise ValueError(f"featurizer {self.name!r} has no state to load")
