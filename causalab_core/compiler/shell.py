"""The weightless shell: real tokenizer and config, meta-device modules, no weights."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from causalab_core.errors import PlanError, shorten
from causalab_core.ir import ModelRef, Site
from causalab_core.plugins.registry import Registry

# Child-module names that architectures use for the same part of a block.
ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")
MLP_NAMES = ("mlp", "feed_forward", "ffn")
ATTN_OUT_NAMES = ("o_proj", "c_proj", "out_proj", "dense")
MLP_OUT_NAMES = ("down_proj", "dense_4h_to_h", "fc_out", "fc2", "c_proj")


def resolve_source(key: str, revision: str | None, registry: Registry, folder: Path | None = None) -> Path:
    """Where the checkpoint for ``key`` is on this machine; never touches the network.

    A relative directory is relative to ``folder`` (the document's), like data paths.
    """
    found = registry.model_source(key, revision)
    if found:
        return Path(found)
    local = (folder or Path.cwd()) / Path(key).expanduser()
    try:
        local.exists()
    except OSError as exc:  # a key too long to be a path
        raise PlanError(f"$.model.key: {shorten(key)} is not a usable model key: {exc.strerror or exc}") from None
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise PlanError(f"$.model.key: {str(local)!r} is a folder but not a model checkpoint (no config.json)")
        return local.resolve()
    if local.exists():
        raise PlanError(f"$.model.key: {str(local)!r} is a file; a model key names a checkpoint folder")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(key, revision=revision, local_files_only=True))
    except Exception:
        at = f" at revision {revision!r}" if revision else ""
        raise PlanError(
            f"$.model.key: model {key!r}{at} is not a local directory, not in the local "
            f"Hugging Face cache, and no installed models plugin knows it{registry.failed_note()}"
        ) from None


@dataclass(frozen=True)
class Shell:
    """A model with meta parameters, plus what the compiler reads off it."""

    source: Path
    config: Any
    tokenizer: Any
    module: Any
    layers_path: str

    def model_ref(self, key: str, revision: str | None, dtype: str, init_seed: int | None = None) -> ModelRef:
        c = self.config
        return ModelRef(
            key=key, revision=revision, dtype=dtype, source=str(self.source), init_seed=init_seed,
            architecture=type(self.module).__name__, layers_path=self.layers_path, layers=c.num_hidden_layers,
            width=c.hidden_size, heads=c.num_attention_heads, head_dim=self._head_dim(), vocab=c.vocab_size,
            sliding_window=attention_window(c),
            last_mlp=self._last_mlp(),
        )

    def site(self, component: str, layer: int, head: int | None) -> Site:
        """The module and tensor that a document's site names, at ``layer``.

        ``attn_output`` and ``mlp_output`` are the sub-layer's own term, before the block adds it
        to the stream: the module's output, or, where the module adds the residual itself
        (BLOOM's take a ``residual`` argument), its output projection's.
        """
        block = f"{self.layers_path}.{layer}"
        width = self.config.hidden_size
        if component in ("block_input", "block_output"):
            tensor = "input" if component == "block_input" else "output"
            return Site(component, layer, block, tensor, width)
        if component == "attn_output":
            return Site(component, layer, self._term(self._child(block, ATTENTION_NAMES), ATTN_OUT_NAMES),
                        "output", width)
        if component == "mlp_output":
            return Site(component, layer, self._term(self._mlp(block), MLP_OUT_NAMES), "output", width)
        attention = self._child(block, ATTENTION_NAMES)
        return Site(component, layer, self._child(attention, ATTN_OUT_NAMES), "input",
                    self._head_dim(), head=head, heads=self.config.num_attention_heads)

    def _head_dim(self) -> int:
        c = self.config
        return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads

    def _term(self, path: str, projections: tuple[str, ...]) -> str:
        """``path``, or its output projection where the module's forward adds the residual it is handed."""
        if "residual" not in inspect.signature(type(self.module.get_submodule(path)).forward).parameters:
            return path
        if getattr(self.config, "slow_but_exact", False) and getattr(self.config, "pretraining_tp", 1) > 1:
            # BLOOM then computes the projection with F.linear on slices: the module is never called.
            raise PlanError(f"{type(self.module).__name__}: slow_but_exact with pretraining_tp > 1 bypasses "
                            f"{path}'s output projection; attn_output and mlp_output need it")
        return self._child(path, projections)

    def _last_mlp(self) -> str | None:
        """The last block's MLP module, unless it has none or adds the residual itself (BLOOM's)."""
        try:
            path = self._mlp(f"{self.layers_path}.{self.config.num_hidden_layers - 1}")
        except PlanError:
            return None
        if "residual" in inspect.signature(type(self.module.get_submodule(path)).forward).parameters:
            return None
        return path

    def _mlp(self, block: str) -> str:
        try:
            return self._child(block, MLP_NAMES)
        except PlanError:
            raise PlanError(f"{type(self.module).__name__}: site mlp_output needs an MLP module in each block, and "
                            f"{block} has none named any of {MLP_NAMES} (OPT's fc1/fc2 sit in the block itself, "
                            "on flattened rows); use block_output, attn_output or head") from None

    def _child(self, path: str, names: tuple[str, ...]) -> str:
        module = self.module.get_submodule(path)
        for name in names:
            if hasattr(module, name):
                return f"{path}.{name}"
        raise PlanError(f"{type(self.module).__name__}: no submodule of {path} is named any of {names}")


@functools.lru_cache(maxsize=8)
def load_shell(source: Path) -> Shell:
    """Build the shell of the checkpoint at ``source`` (cached per directory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise PlanError(f"$.model.key: {str(source)!r} is not a checkpoint transformers can read: "
                        f"{shorten(' '.join(str(exc).split()))}") from None
    with torch.device("meta"):
        module = AutoModelForCausalLM.from_config(config)
    layers = [
        name for name, m in module.named_modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) == config.num_hidden_layers
    ]
    if not layers:
        raise PlanError(f"{source}: cannot find the list of {config.num_hidden_layers} blocks in {type(module).__name__}")
    return Shell(source, config, tokenizer, module, layers[0])


def attention_window(config) -> int | None:
    """The tokens a position attends back over where some layer's attention is local (sliding window,
    GPT-Neo's ``local`` layers), else None."""
    if getattr(config, "use_sliding_window", True) is False:  # Qwen 2 keeps the size with the switch off
        return None
    if "local" in (getattr(config, "attention_layers", None) or ()):
        return config.window_size
    return getattr(config, "sliding_window", None)
