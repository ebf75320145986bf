"""Tiny random Llama and GPT-2 checkpoints with locally made tokenizers.

Built from a seed with no network: a word-level tokenizer (Llama) and a
byte-level BPE trained on the task's own sentences (GPT-2), saved with
``save_pretrained``. Weights are random; use them to test plumbing and
parity, never to claim a finding.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
COUNTS = ("one", "two", "three", "four", "five", "six")
NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi")
WORDS = (
    "Q", "A", ":", "?", ".", ",", "!", "what", "day", "days", "is", "after", "before", "the",
    "who", "has", "a", "an", "and", "of", "box", "key", "ball", "cup", "book", "in", "put", "gave",
    "to", "you", "are", "helpful", "assistant", "hello", "hi", "answer", "question", "user",
    "system", "tell", "me", "which", "it", "was", "yes", "no",
)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} . {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")

BUILDERS = {
    "tiny-llama": {"arch": "llama", "layers": 4, "width": 32, "heads": 4, "seed": 0},
    "tiny-gpt2": {"arch": "gpt2", "layers": 4, "width": 32, "heads": 4, "seed": 0},
}


def corpus() -> list[str]:
    """Sentences that cover the test vocabulary (the BPE tokenizer is trained on them)."""
    lines = []
    for i, day in enumerate(DAYS):
        for n, count in enumerate(COUNTS, start=1):
            answer = DAYS[(i + n) % 7]
            lines.append(f"Q: what day is {count} days after {day}? A: {answer}")
    for a in NAMES:
        for b in NAMES:
            lines.append(f"{a} put the key in the box and {b} has the ball. Q: who has the ball? A: {b}")
    lines.append(" ".join(WORDS))
    return lines


def word_level_tokenizer(words=None):
    """A whitespace/punctuation word-level tokenizer over ``words`` (BOS prepended, chat template set)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = words or (*WORDS, *DAYS, *COUNTS, *NAMES)
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys((*SPECIALS, *words)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )


def bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
        pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE,
    )


def build(path: str | Path, arch: str = "llama", layers: int = 4, width: int = 32, heads: int = 4, seed: int = 0) -> Path:
    """Write a tiny random checkpoint (config, safetensors, tokenizer) to ``path``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    path = Path(path)
    if arch == "llama":
        tokenizer = word_level_tokenizer()
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=width, intermediate_size=2 * width,
            num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
            max_position_embeddings=128, initializer_range=0.2, tie_word_embeddings=False,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        model_cls = LlamaForCausalLM
    elif arch == "gpt2":
        tokenizer = bpe_tokenizer()
        config = GPT2Config(
            vocab_size=len(tokenizer), n_embd=width, n_layer=layers, n_head=heads, n_positions=128,
            initializer_range=0.2, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        )
        model_cls = GPT2LMHeadModel
    else:
        raise ValueError(f"unknown test architecture {arch!r} (llama or gpt2)")
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def cache_root() -> Path:
    return Path(os.environ.get("CAUSALAB_HOME", Path.home() / ".cache" / "causalab"))


def builder_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def ensure(name: str) -> Path:
    """The directory of the named test model, built on first use (atomically)."""
    spec = BUILDERS[name]
    target = cache_root() / "testing" / f"{name}-{builder_digest()}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    build(tmp, **spec)
    try:
        tmp.rename(target)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
