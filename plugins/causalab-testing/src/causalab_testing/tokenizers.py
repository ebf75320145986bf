"""Tokenizers in the styles real checkpoints ship, and chat templates in their shapes, built locally.

Styles (``tokenizer(style, bos=...)``), each trained or built here from the
project's own sentences, with no download:

- ``byte_bpe``: byte-level BPE, a word's leading space in its token (GPT-2, Llama 3, Qwen);
- ``sp_bpe``: SentencePiece-style BPE: ``▁`` marks a word start (Metaspace), unseen
  characters fall back to byte tokens ``<0xE6>`` (Llama 2, Mistral);
- ``sp_unigram``: the same conventions on a Unigram model (Gemma, T5's family);
- ``sp_normalizer``: Llama 2's own layout, where the ``▁`` comes from normalizers
  (``Prepend`` and ``Replace``) and no pre-tokenizer splits the text;
- ``word``: a whole-word vocabulary (the project's tiny Llama).

``bos=True`` makes the tokenizer's post-processor put a BOS before a plain
prompt, as Llama's and Gemma's do; ``bos=False`` puts none, as GPT-2's and
Qwen's. Every tokenizer knows the special tokens of every template below, so
any style renders any template.

Templates (``TEMPLATES``), written by the project in the shapes real ones have:
``chatml`` (role markers between begin/end tokens, no BOS: Qwen), ``llama3``
(header markers, the begin-of-text token first), ``gemma`` (turn markers, BOS
first, the system prompt folded into the first user turn, ``assistant``
called ``model``), ``mistral`` (BOS first, the system prompt folded into the
last user turn, no generation prompt of its own) and ``phi3`` (role tokens,
no BOS: a template that puts none even where the tokenizer would).
"""

from __future__ import annotations

import functools
import json

from causalab_testing import models

STYLES = ("byte_bpe", "sp_bpe", "sp_unigram", "sp_normalizer", "word")

# Sentences beyond the task's: non-ASCII words, and words glued to punctuation, so merges across them exist.
EXTRA = (
    "Zoë und Jürgen trafen Åsa in Malmö. Zoë, Jürgen, Åsa.",
    "naïve café résumé São Paulo Łódź Kraków",
    "Q:Alice Q:Bob (Carol) [Dave] Erin's key, Frank's box; Grace: Heidi!",
    "Alice, Bob. Carol! Dave? Erin; Frank: Grace, Heidi.",
)
CHAT_SPECIALS = (
    "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<start_of_turn>", "<end_of_turn>", "[INST]", "[/INST]", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
)
BYTES = tuple(f"<0x{i:02X}>" for i in range(256))
# (bos, eos, pad, unk) per style, spelled as the checkpoints of that style spell them.
NAMES = {
    "byte_bpe": ("<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", None),
    "sp_bpe": ("<s>", "</s>", "<pad>", "<unk>"),
    "sp_unigram": ("<bos>", "<eos>", "<pad>", "<unk>"),
    "sp_normalizer": ("<s>", "</s>", "<pad>", "<unk>"),
    "word": ("<s>", "</s>", "<pad>", "<unk>"),
}


def sentences() -> list[str]:
    return [*models.corpus(), *EXTRA]


def _specials(style: str) -> list[str]:
    return [t for t in NAMES[style] if t is not None]


# Llama 3's split (Qwen's differs only in taking digits one at a time): a punctuation mark may lead a word.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_bpe():
    from tokenizers import Regex, Tokenizer, decoders, models as tmodels, pre_tokenizers, trainers

    tok = Tokenizer(tmodels.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=_specials("byte_bpe"), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sentences(), trainer=trainer)
    return tok


def _with_byte_fallback(tok):
    """The trained model with the 256 byte tokens added and byte fallback on (as SentencePiece converts)."""
    from tokenizers import Tokenizer

    spec = json.loads(tok.to_str())
    model = spec["model"]
    if model["type"] == "BPE":
        start = len(model["vocab"])
        model["vocab"].update({b: start + i for i, b in enumerate(BYTES) if b not in model["vocab"]})
    else:  # Unigram: (piece, score) pairs; bytes score below every piece, so they are the last resort
        model["vocab"].extend([b, -100.0] for b in BYTES)
    model["byte_fallback"] = True
    return Tokenizer.from_str(json.dumps(spec))


def _sentencepiece(kind: str):
    from tokenizers import Tokenizer, decoders, models as tmodels, normalizers, pre_tokenizers, trainers

    style = {"bpe": "sp_bpe", "unigram": "sp_unigram", "normalizer": "sp_normalizer"}[kind]
    specials = _specials(style)
    if kind == "unigram":
        tok = Tokenizer(tmodels.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=specials, unk_token="<unk>",
                                          show_progress=False)
    else:
        tok = Tokenizer(tmodels.BPE(unk_token="<unk>", fuse_unk=True))
        trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials, show_progress=False)
    # Words are learned split at the ▁ that starts each one, as SentencePiece trains.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.train_from_iterator(sentences(), trainer=trainer)
    tok = _with_byte_fallback(tok)
    if kind == "normalizer":  # Llama 2's tokenizer.json: the ▁ from normalizers, nothing splits the text
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.pre_tokenizer = None
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁",
                                                                                     prepend_scheme="first")])
    return tok


def _word():
    from tokenizers import Tokenizer, models as tmodels, pre_tokenizers

    words = [*models.WORDS, *models.DAYS, *models.COUNTS, *models.NAMES,
             *(w for line in EXTRA for w, _ in pre_tokenizers.Whitespace().pre_tokenize_str(line))]
    vocab = {t: i for i, t in enumerate(dict.fromkeys((*_specials("word"), *words)))}
    tok = Tokenizer(tmodels.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


BUILDERS = {
    "byte_bpe": _byte_bpe,
    "sp_bpe": lambda: _sentencepiece("bpe"),
    "sp_unigram": lambda: _sentencepiece("unigram"),
    "sp_normalizer": lambda: _sentencepiece("normalizer"),
    "word": _word,
}


@functools.cache
def tokenizer(style: str, bos: bool = True, template: str | None = None):
    """A transformers fast tokenizer of ``style``, with one of ``TEMPLATES`` as its chat template.

    ``bos``: its post-processor puts a BOS before a plain prompt. Cached: treat it as read-only.
    """
    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast

    if style not in BUILDERS:
        raise ValueError(f"unknown tokenizer style {style!r} (one of {', '.join(STYLES)})")
    tok = BUILDERS[style]()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CHAT_SPECIALS])
    bos_name, eos, pad, unk = NAMES[style]
    bos_id = tok.token_to_id(bos_name)
    if bos:
        single = processors.TemplateProcessing(single=f"{bos_name} $A", pair=f"{bos_name} $A $B",
                                               special_tokens=[(bos_name, bos_id)])
        # Byte-level checkpoints keep ByteLevel's offsets untrimmed (Llama 3's post-processor does the same).
        tok.post_processor = (processors.Sequence([processors.ByteLevel(trim_offsets=False), single])
                              if style == "byte_bpe" else single)
    elif style == "byte_bpe":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=bos_name, eos_token=eos, pad_token=pad, unk_token=unk,
        additional_special_tokens=list(CHAT_SPECIALS), chat_template=TEMPLATES[template] if template else None,
    )


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
# Gemma 3's layout: no system turn; its text, then a blank line, opens the first user turn.
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for m in loop_messages %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ prefix if loop.first else '' }}{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# Mistral's layout: the system text joins the last user turn; [/INST] already asks for the answer.
MISTRAL = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}"
    "{% for m in loop_messages %}{% if m['role'] == 'user' %}"
    "{% if loop.last and system is defined %}[INST] {{ system + '\n\n' + m['content'] }}[/INST]"
    "{% else %}[INST] {{ m['content'] }}[/INST]{% endif %}"
    "{% else %} {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
PHI3 = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TEMPLATES = {"chatml": CHATML, "llama3": LLAMA3, "gemma": GEMMA, "mistral": MISTRAL, "phi3": PHI3}
# Whether the template itself writes the BOS, and which turn (if any) the system text joins.
TEMPLATE_BOS = {"chatml": False, "llama3": True, "gemma": True, "mistral": True, "phi3": False}
SYSTEM_FOLDS_INTO = {"chatml": None, "llama3": None, "gemma": "first", "mistral": "last", "phi3": None}


def shell_checkpoint(path, style: str, bos: bool = True, template: str | None = None):
    """A checkpoint folder without weights (a tiny Llama config and the tokenizer): enough for the compiler.

    ``causalab plan`` and ``validate`` read only these; a run would need weights.
    """
    from pathlib import Path

    from transformers import LlamaConfig

    tok = tokenizer(style, bos, template)
    LlamaConfig(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=256, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    ).save_pretrained(path)
    tok.save_pretrained(path)
    return Path(path)
