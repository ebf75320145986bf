"""A model's computation graph as circuit work defines it (ACDC, EAP): plain data, from its config alone.

Nodes are the input embeddings (``input``), every attention head (``a{layer}.h{head}``), every MLP
(``m{layer}``) and the logits (``logits``). An edge joins a node's output, its term in the residual stream, to
a later node's input: a head's query, key and value inputs separately (``a2.h3<q>``), an MLP's input, the
logits. Under grouped-query attention a key or value input is its key/value group's, shared by the group's
query heads (``a2.kv1<k>``): heads of a group cannot read different keys. In a block that runs attention and then the MLP on the stream attention wrote to (Llama, Mistral,
Qwen 2 and 3, GPT-2), a layer's MLP reads its own layer's heads; what every later node reads is the sum of
every earlier node's term, so each such pair is an edge. GPT-2 small's graph has 158 nodes and 32,491 edges,
as in ACDC and EAP.

Families whose terms are not plain summands of the stream are refused: a norm after attention or the MLP
(Gemma 2 and 3, OLMo 2) rescales a head's term by the whole layer's, and parallel blocks (GPT-J, GPT-NeoX,
Phi) read attention and MLP from the same stream.
"""

from __future__ import annotations

from dataclasses import dataclass

SEQUENTIAL = ("llama", "mistral", "qwen2", "qwen3", "gpt2")
"""The families (``config.model_type``) whose graph this is."""
INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class Graph:
    """Nodes in the order the forward computes them; edges as (sender, receiver), the receiver with its input."""

    family: str
    layers: int
    heads: int
    kv_heads: int
    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]

    def __repr__(self) -> str:
        return f"Graph({self.family}: {self.layers} layers x {self.heads} heads, {len(self.nodes)} nodes, " \
               f"{len(self.edges)} edges)"


def graph(config) -> Graph:
    """The computation graph of a model with this transformers config; ValueError for a family it does not cover."""
    family = getattr(config, "model_type", None)
    if family not in SEQUENTIAL:
        raise ValueError(f"the computation graph covers {', '.join(SEQUENTIAL)}, not {family!r}: its heads' and "
                         "MLPs' terms are not plain summands of one residual stream")
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    nodes, edges, written = ["input"], [], ["input"]  # ``written``: every term in the stream so far
    for layer in range(layers):
        block = [f"a{layer}.h{head}" for head in range(heads)]
        inputs = [f"{head}<q>" for head in block] + [f"{name}<{part}>" for part in INPUTS[1:]
                                                     for name in key_value_inputs(layer, heads, kv_heads)]
        edges += [(sender, receiver) for receiver in inputs for sender in written]
        nodes += block
        written += block
        edges += [(sender, f"m{layer}") for sender in written]
        nodes.append(f"m{layer}")
        written.append(f"m{layer}")
    edges += [(sender, "logits") for sender in written]
    nodes.append("logits")
    return Graph(family, layers, heads, kv_heads, tuple(nodes), tuple(edges))


def key_value_inputs(layer: int, heads: int, kv_heads: int) -> list[str]:
    """The names whose ``<k>`` and ``<v>`` inputs a layer has: its heads, or its key/value groups."""
    if kv_heads == heads:
        return [f"a{layer}.h{head}" for head in range(heads)]
    return [f"a{layer}.kv{group}" for group in range(kv_heads)]
