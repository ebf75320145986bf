"""Tiny random checkpoints of twelve Hugging Face families, built from a seed, for site tests.

Each family keeps what makes it itself (Gemma's extra norms and soft-capping,
parallel attention and MLP in GPT-J and GPT-NeoX, OPT's learned positions,
BLOOM's fused QKV and ALiBi, Qwen 3's head size that is not width / heads)
and uses grouped-query attention where the family has it, so a ``head`` site
is tested with several query heads per key/value head. All use the
word-level tokenizer of ``causalab_testing.models`` (BOS first) but Qwen 2:
transformers loads any ``qwen2`` checkpoint's tokenizer as ``Qwen2Tokenizer``,
rebuilt from vocabulary and merges whatever class the checkpoint names, so it
gets the project's byte-level BPE (no BOS), the style Qwen ships. Three
layers, width 32: a build takes well under a second. Weights are random:
plumbing only.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from causalab_testing import models

WIDTH, LAYERS, HEADS, SEED = 32, 3, 4, 0

# family -> (transformers config class, model class, the family's own config arguments)
FAMILIES: dict[str, tuple[str, str, dict]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"num_key_value_heads": 2}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 2}),
    # Qwen 3: heads * head_dim (64) is not the width (32), as on the released checkpoints.
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"num_key_value_heads": 2, "head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {
        "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}),
    # Gemma 3 text-only: one key/value head for four query heads, as gemma-3-1b.
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {
        "num_key_value_heads": 1, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"num_key_value_heads": 2, "sliding_window": 4}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"use_parallel_residual": True}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"num_key_value_heads": 2}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {"num_key_value_heads": 2}),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"rotary_dim": 4}),
    "opt": ("OPTConfig", "OPTForCausalLM", {"ffn_dim": 2 * WIDTH, "word_embed_proj_dim": WIDTH, "init_std": 0.2}),
    "bloom": ("BloomConfig", "BloomForCausalLM", {}),
}


def config(family: str, tokenizer):
    """The family's config at test size (common sizes by their standard names; configs map the old ones)."""
    import transformers

    config_name, _, own = FAMILIES[family]
    cls = getattr(transformers, config_name)
    common = {
        "vocab_size": len(tokenizer), "hidden_size": WIDTH, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "intermediate_size": 2 * WIDTH, "max_position_embeddings": 128,
        "initializer_range": 0.2, "tie_word_embeddings": False,
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if family in ("gptj", "bloom"):  # their configs take n_embd / n_layer / n_head (and no intermediate size)
        common.pop("intermediate_size")
        common["n_embd" if family == "gptj" else "hidden_size"] = common.pop("hidden_size")
        common["n_layer"], common["n_head"] = common.pop("num_hidden_layers"), common.pop("num_attention_heads")
        if family == "gptj":
            common["n_positions"] = common.pop("max_position_embeddings")
        else:
            common.pop("max_position_embeddings")
    if family == "opt":
        common.pop("intermediate_size"), common.pop("initializer_range")
    return cls(**common, **own)


def build(path: str | Path, family: str, seed: int = SEED) -> Path:
    """Write the family's tiny random checkpoint (config, safetensors, tokenizer) to ``path``."""
    import torch
    import transformers

    path = Path(path)
    tokenizer = models.bpe_tokenizer() if family == "qwen2" else models.word_level_tokenizer()
    cfg = config(family, tokenizer)
    torch.manual_seed(seed)
    model = getattr(transformers, FAMILIES[family][1])(cfg).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def digest() -> str:
    """Changes when this builder or the tokenizer it borrows changes, so a stale cache is never reused."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(models.__file__).read_bytes())
    return h.hexdigest()[:12]


def ensure(family: str) -> Path:
    """The directory of the family's test checkpoint under ``$CAUSALAB_HOME``, built on first use (atomically)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown test family {family!r} (one of {', '.join(FAMILIES)})")
    target = models.cache_root() / "testing" / "families" / f"{family}-{digest()}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{family}-", dir=target.parent))
    build(tmp, family)
    try:
        tmp.rename(target)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
