"""What the circuit models do, measured from their weights: attention patterns and head ablations.

``induction_facts``: on held-out rows, each layer-0 head's attention from a token to the one before it
(a previous-token head attends there), each layer-1 head's attention from the last token to the token after
its earlier occurrence (an induction head attends there), and the accuracy with each group of heads'
outputs zeroed. ``ioi_facts``: the accuracy, and what the model answers on each order (ABBA, BABA).
Recorded in the checkpoint's ``training.json`` by the recipe, and checked against the shipped weights by the
tests.
"""

from __future__ import annotations

import contextlib

import torch

from causalab_toy import circuits

THRESHOLD = 0.5
"""A head is named for a pattern where its mean attention to the pattern's position is above this."""


@torch.no_grad()
def induction_facts(model, tokenizer, n: int = 200) -> dict:
    model.eval()
    model.set_attn_implementation("eager")  # the attention weights come back from eager attention only
    rows = circuits.rows("induction", n, "test", seed=2)
    ids = torch.tensor([tokenizer(r["base"])["input_ids"] for r in rows])
    answers = torch.tensor([tokenizer(r["base_answer"], add_special_tokens=False)["input_ids"][-1] for r in rows])
    attentions = model(ids, output_attentions=True).attentions
    length = ids.shape[1]
    previous = torch.stack([attentions[0][:, :, t, t - 1] for t in range(2, length)], -1).mean((0, 2))
    # the last token is the chunk's 4th (rows: BOS, 4 prefix tokens, a chunk of 8, its first 4 again)
    induction = attentions[1][:, :, -1, 1 + 4 + 4].mean(0)
    prev_heads = [f"a0.h{h}" for h, v in enumerate(previous.tolist()) if v > THRESHOLD]
    ind_heads = [f"a1.h{h}" for h, v in enumerate(induction.tolist()) if v > THRESHOLD]
    heads = model.config.num_attention_heads
    others = [f"a0.h{h}" for h in range(heads) if f"a0.h{h}" not in prev_heads]

    def accuracy(ablated=()):
        with zeroed(model, ablated):
            return (model(ids, logits_to_keep=1).logits[:, -1].argmax(-1) == answers).float().mean().item()

    return {
        "previous_token_attention": [round(v, 3) for v in previous.tolist()],
        "induction_attention": [round(v, 3) for v in induction.tolist()],
        "previous_token_heads": prev_heads, "induction_heads": ind_heads,
        "accuracy": accuracy(),
        "accuracy_previous_token_heads_zeroed": accuracy(prev_heads),
        "accuracy_induction_heads_zeroed": accuracy(ind_heads),
        "accuracy_other_layer0_heads_zeroed": accuracy(others),
    }


@contextlib.contextmanager
def zeroed(model, heads):
    """Heads' outputs (``a{layer}.h{head}``) set to zero before the output projection."""
    d = model.config.hidden_size // model.config.num_attention_heads
    blocks = model.transformer.h if model.config.model_type == "gpt2" else model.model.layers
    handles = []
    for name in heads:
        layer, head = (int(x) for x in name[1:].split(".h"))
        attention = blocks[layer].attn if model.config.model_type == "gpt2" else blocks[layer].self_attn
        projection = attention.c_proj if model.config.model_type == "gpt2" else attention.o_proj

        def hook(module, args, head=head):
            z = args[0].clone()
            z[..., head * d:(head + 1) * d] = 0
            return (z, *args[1:])
        handles.append(projection.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def ioi_facts(model, tokenizer, n: int = 400) -> dict:
    """Held-out accuracy overall and per order, how often a wrong answer is the subject, where each head
    attends from the last token (the indirect object, the subject's first and second mention; per layer, per
    head), and how far zeroing each head alone moves the accuracy (the five largest drops)."""
    model.eval()
    model.set_attn_implementation("eager")
    rows = circuits.rows("ioi", n, "test", seed=2)
    ids = torch.tensor([tokenizer(r["base"])["input_ids"] for r in rows])
    out = model(ids, output_attentions=True)
    predicted = out.logits[:, -1].argmax(-1).tolist()
    words = [["<s>", *r["base"].split()] for r in rows]
    at = {"io": [w.index(r["io"]) for w, r in zip(words, rows)],
          "s1": [w.index(r["s"]) for w, r in zip(words, rows)],
          "s2": [len(w) - 1 - w[::-1].index(r["s"]) for w, r in zip(words, rows)]}
    every = torch.arange(n)
    attention = {name: [[round(v, 3) for v in layer[every, :, -1, :][every, :, positions].mean(0).tolist()]
                        for layer in out.attentions] for name, positions in at.items()}
    io = [tokenizer(r["base_answer"], add_special_tokens=False)["input_ids"][-1] for r in rows]
    s = [tokenizer(r["subject"], add_special_tokens=False)["input_ids"][-1] for r in rows]
    right = [p == a for p, a in zip(predicted, io)]
    accuracy = {"accuracy": sum(right) / n}
    for order in ("ABBA", "BABA"):
        chosen = [ok for ok, r in zip(right, rows) if r["order"] == order]
        accuracy[f"accuracy_{order}"] = sum(chosen) / len(chosen)
    wrong = [(p, b) for p, b, ok in zip(predicted, s, right) if not ok]
    facts = {**accuracy, "wrong_answers_that_are_the_subject": sum(p == b for p, b in wrong) / len(wrong)
             if wrong else None, "attention_from_last": attention}
    drops = {}
    for layer in range(model.config.num_hidden_layers):
        for head in range(model.config.num_attention_heads):
            with zeroed(model, [f"a{layer}.h{head}"]):
                hit = model(ids, logits_to_keep=1).logits[:, -1].argmax(-1).tolist()
            drops[f"a{layer}.h{head}"] = round(sum(p == a for p, a in zip(hit, io)) / n - facts["accuracy"], 4)
    facts["accuracy_change_one_head_zeroed"] = dict(sorted(drops.items(), key=lambda kv: kv[1])[:5])
    return facts
