"""The toy models' tokenizer: whole words of the task's vocabulary, BOS first, a plain chat template.

The toy's own copy, not the test models' (causalab-testing): a shipped
checkpoint's recipe must not move when test tooling changes.
"""

from __future__ import annotations

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
# The template renders the BOS the models were trained with: a rendered conversation is tokenized
# without special tokens (causalab never adds one behind the template).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} . {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def word_level_tokenizer(words):
    """A whitespace/punctuation word-level tokenizer over ``words`` (BOS prepended, chat template set)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(dict.fromkeys((*SPECIALS, *words)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )
