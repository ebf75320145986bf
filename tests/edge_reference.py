"""A plain-torch reference for edge and path patching, written from the graph's definition (tests only).

Each row runs alone. The residual stream is kept as its terms (the embeddings, each head's output through its
columns of the output projection, each MLP's output, and the constant biases no node owns), and every node's
input is the sum of the terms written before it, with each patched edge's sender term taken from the patch
instead. Attention is computed head by head from its own query, key and value inputs: the model's modules
serve only as weights (norms, projections, MLPs, rotary tables).
"""

from __future__ import annotations

import torch


class EdgeReference:
    def __init__(self, model):
        self.m, self.c = model.eval(), model.config
        self.family = self.c.model_type
        self.heads = self.c.num_attention_heads
        self.kv = getattr(self.c, "num_key_value_heads", None) or self.heads
        self.d = self.c.hidden_size // self.heads
        self.blocks = model.transformer.h if self.family == "gpt2" else model.model.layers

    def embed(self, ids):
        if self.family == "gpt2":
            t = self.m.transformer
            return t.wte.weight[ids] + t.wpe.weight[torch.arange(len(ids))]
        return self.m.model.embed_tokens.weight[ids]

    def qkv(self, layer, part, number, stream):
        """Query (head ``number``) or key/value (group ``number``) of a layer, from its own input stream."""
        b, d, width = self.blocks[layer], self.d, self.c.hidden_size
        if self.family == "gpt2":
            n = b.ln_1(stream)
            start = "qkv".index(part) * width + number * d
            return n @ b.attn.c_attn.weight[:, start:start + d] + b.attn.c_attn.bias[start:start + d]
        n = b.input_layernorm(stream)
        proj = getattr(b.self_attn, f"{part}_proj")
        w, bias = proj.weight[number * d:(number + 1) * d], proj.bias
        return torch.nn.functional.linear(n, w, None if bias is None else bias[number * d:(number + 1) * d])

    def attend(self, layer, q, k, v):
        """One head's causal attention over its key/value group (rotary where the family has it)."""
        length = q.shape[0]
        if self.family != "gpt2":
            from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

            cos, sin = self.m.model.rotary_emb(q[None], torch.arange(length)[None])
            q, k = apply_rotary_pos_emb(q[None, None], k[None, None], cos, sin)
            q, k = q[0, 0], k[0, 0]
        scores = q @ k.T / self.d ** 0.5
        scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
        return scores.softmax(-1) @ v

    def head_term(self, layer, head, z):
        b, d = self.blocks[layer], self.d
        if self.family == "gpt2":
            return z @ b.attn.c_proj.weight[head * d:(head + 1) * d]
        return z @ b.self_attn.o_proj.weight[:, head * d:(head + 1) * d].T

    def attention_bias(self, layer):
        b = self.blocks[layer]
        proj = b.attn.c_proj if self.family == "gpt2" else b.self_attn.o_proj
        return proj.bias

    def mlp(self, layer, stream):
        b = self.blocks[layer]
        return b.mlp(b.ln_2(stream) if self.family == "gpt2" else b.post_attention_layernorm(stream))

    def logits(self, stream):
        final = self.m.transformer.ln_f if self.family == "gpt2" else self.m.model.norm
        return self.m.lm_head(final(stream))

    @torch.no_grad()
    def run(self, ids, replaced=None, frozen=None):
        """The last position's logits, and every node's term and every node input's stream.

        ``replaced(receiver, stream, terms)`` gives a receiver's stream (None: as computed); ``terms`` maps each
        node written so far to its term, ``stream`` is their sum with the biases."""
        ids = torch.tensor(ids)
        terms, streams, biases = {"input": self.embed(ids)}, {}, []

        def stream_for(receiver):
            s = sum(terms.values()) + sum(biases) if biases else sum(terms.values())
            if replaced is not None:
                s = replaced(receiver, s, terms)
            streams[receiver] = s
            return s

        for layer in range(self.c.num_hidden_layers):
            kv_names = [f"a{layer}.h{h}" for h in range(self.heads)] if self.kv == self.heads else \
                [f"a{layer}.kv{g}" for g in range(self.kv)]
            queries = [self.qkv(layer, "q", h, stream_for(f"a{layer}.h{h}<q>")) for h in range(self.heads)]
            keys = [self.qkv(layer, "k", g, stream_for(f"{n}<k>")) for g, n in enumerate(kv_names)]
            values = [self.qkv(layer, "v", g, stream_for(f"{n}<v>")) for g, n in enumerate(kv_names)]
            group = self.heads // self.kv
            new = {f"a{layer}.h{h}": self.head_term(layer, h, self.attend(layer, queries[h], keys[h // group],
                                                                          values[h // group]))
                   for h in range(self.heads)}
            terms.update(new)
            if self.attention_bias(layer) is not None:
                biases.append(self.attention_bias(layer))
            terms[f"m{layer}"] = self.mlp(layer, stream_for(f"m{layer}"))
        return self.logits(stream_for("logits"))[-1], terms, streams

    def edge_patched(self, ids, edges, source_terms):
        """Each receiver's stream with each patched sender's term replaced by ``source_terms[sender]``."""
        into = {}
        for s, r in edges:
            into.setdefault(r, []).append(s)

        def replaced(receiver, stream, terms):
            for s in into.get(receiver, ()):
                stream = stream - terms[s] + source_terms[s]
            return stream

        return self.run(ids, replaced)[0]

    def path_patched(self, ids, sender, receivers, source_term):
        """The receivers read the clean run's stream with the sender's clean term replaced; all else runs on."""
        _, clean_terms, clean_streams = self.run(ids)

        def replaced(receiver, stream, terms):
            if receiver in receivers:
                return clean_streams[receiver] - clean_terms[sender] + source_term
            return stream

        return self.run(ids, replaced)[0]
