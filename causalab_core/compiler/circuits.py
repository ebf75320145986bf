"""A model's computation graph (``ir.graph``) from its config, and a document's edge patches compiled against it."""

from __future__ import annotations

import dataclasses

from causalab_core.compiler.shell import resolve_source
from causalab_core.errors import PlanError, echo, shorten
from causalab_core.ir import EdgePatch, Read, Receiver, Sender
from causalab_core.ir.graph import Graph, graph
from causalab_core.plugins.registry import Registry


def computation_graph(key: str, revision: str | None, registry: Registry) -> Graph:
    """The graph of the checkpoint a model key names; a family the graph does not cover is one line."""
    from transformers import AutoConfig

    source = resolve_source(key, revision, registry)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise PlanError(f"$.model.key: {echo(str(source))} is not a checkpoint transformers can read: "
                        f"{shorten(' '.join(str(exc).split()))}") from None
    try:
        return graph(config)
    except ValueError as exc:
        raise PlanError(f"$.model.key: {echo(key)}: {exc}") from None


# Where each covered family keeps what an edge reads and edits, below a block (and the final norm beside the
# blocks): the first norm (whose input is the stream a head reads), the q, k and v projections (GPT-2's one
# fused ``c_attn``: q, k and v columns one after another), the MLP's norm.
FAMILY_MODULES = {
    "gpt2": {"norm": "ln_1", "q": "attn.c_attn", "k": "attn.c_attn", "v": "attn.c_attn", "mlp": "ln_2",
             "final": "ln_f"},
    **{family: {"norm": "input_layernorm", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
                "v": "self_attn.v_proj", "mlp": "post_attention_layernorm", "final": "norm"}
       for family in ("llama", "mistral", "qwen2", "qwen3")},
}


class EdgePatching:
    """Compiles a document's ``edges`` against one shell and its graph."""

    def __init__(self, shell, ref, model_key: str):
        self.shell, self.ref, self.key = shell, ref, model_key
        self._graph: Graph | None = None

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            try:
                self._graph = graph(self.shell.config)
            except ValueError as exc:
                raise PlanError(f"$.model.key: {echo(self.key)}: {exc}") from None
            self.order = {node: i for i, node in enumerate(self._graph.nodes)}
            self.known = set(self._graph.edges)
            self.receivers = {r for _, r in self._graph.edges}
        return self._graph

    def patch(self, name: str, spec: dict, where: str, source_windows) -> tuple[EdgePatch, dict[str, Read]]:
        """The plan's ``EdgePatch`` for one ``edges`` entry at a point, and the reads of the source run it needs
        (``source_windows``: every position of each source row)."""
        g = self.graph
        if spec.get("path") is not None:
            path = spec["path"]
            pairs = [(path["sender"], r, f"{where}.path.receivers[{i}]") for i, r in enumerate(path["receivers"])]
            self.node(path["sender"], f"{where}.path.sender")
        else:
            pairs = [(s, r, f"{where}.edges[{i}]") for i, (s, r) in enumerate(spec["edges"])]
            for s, _, at in pairs:
                self.node(s, f"{at}[0]")
        for s, r, at in pairs:
            if r not in self.receivers:
                kv = "`a{layer}.kv{group}<k|v>` (grouped-query attention)" if g.kv_heads < g.heads else \
                    "`a{layer}.h{head}<k|v>`"
                hint = ""
                if g.kv_heads < g.heads and r.endswith(("<k>", "<v>")) and ".h" in r:
                    layer, head = r[1:].partition("<")[0].split(".h")
                    hint = f" (head {head}'s is a{layer}.kv{int(head) // (g.heads // g.kv_heads)}{r[-3:]})" \
                        if layer.isdigit() and head.isdigit() else ""
                raise PlanError(f"{at}: {echo(r)} is no node input of the graph ({g!r}){hint}: a head's query "
                                f"`a{{layer}}.h{{head}}<q>`, a key or value {kv}, an MLP's `m{{layer}}` or `logits`")
            if (s, r) not in self.known:
                raise PlanError(f"{at}: {echo(s)} is computed after {echo(r)} reads the stream: no such edge")
        unique = list(dict.fromkeys((s, r) for s, r, _ in pairs))
        if len(unique) < len(pairs):
            raise PlanError(f"{where}: an edge is listed twice")
        senders = sorted({s for s, _ in unique}, key=self.order.get)
        receivers = sorted({r for _, r in unique}, key=self.receiver_order)
        sender_at, receiver_at = {s: i for i, s in enumerate(senders)}, {r: i for i, r in enumerate(receivers)}
        kind = (spec.get("intervention") or {}).get("kind", "swap")
        reads = {} if kind == "zero" else {
            s: Read(f"{name}:{s}", self.sender(s).site, source_windows) for s in senders}
        return EdgePatch(
            name=name, senders=tuple(self.sender(s) for s in senders),
            receivers=tuple(self.receiver(r) for r in receivers),
            edges=tuple(sorted((sender_at[s], receiver_at[r]) for s, r in unique)),
            ablation=kind, reads=tuple(read.name for read in reads.values()), path=spec.get("path") is not None,
        ), {read.name: read for read in reads.values()}

    def node(self, name: str, at: str) -> None:
        if name not in self.order or name == "logits":
            g = self.graph
            raise PlanError(f"{at}: {echo(name)} is no node that writes to the stream in the graph ({g!r}): "
                            f"`input`, a head `a{{layer}}.h{{head}}` (layers 0-{g.layers - 1}, heads 0-{g.heads - 1}) "
                            "or an MLP `m{layer}`")

    def receiver_order(self, name: str) -> tuple[int, int]:
        node, _, part = name.partition("<")
        node = node.replace(".kv", ".h") if ".kv" in node else node
        return self.order[node], "qkv>".index(part[:1] or ">")

    def sender(self, name: str) -> Sender:
        if name == "input":
            return Sender(name, self.shell.site("block_input", 0, None))
        if name.startswith("m"):
            return Sender(name, self.shell.site("mlp_output", int(name[1:]), None))
        layer, head = (int(x) for x in name[1:].split(".h"))
        site = self.shell.site("head", layer, head)
        return Sender(name, site, projection=site.module)

    def receiver(self, name: str) -> Receiver:
        modules, layers_path = FAMILY_MODULES[self.graph.family], self.ref.layers_path
        if name == "logits":
            final = f"{layers_path.rpartition('.')[0]}.{modules['final']}"
            return Receiver(name, "logits", self.ref.layers, self.exists(final))
        if name.startswith("m"):
            layer = int(name[1:])
            return Receiver(name, "mlp", layer, self.exists(f"{layers_path}.{layer}.{modules['mlp']}"))
        node, _, part = name.partition("<")
        kind = part.rstrip(">")
        layer_text, _, index = node[1:].partition(".")
        layer, d = int(layer_text), self.ref.head_dim
        number = int(index.removeprefix("kv").removeprefix("h"))
        block = f"{layers_path}.{layer}"
        fused = modules["q"] == modules["k"]  # GPT-2's c_attn: q, k, v of every head side by side
        start = ("qkv".index(kind) * self.ref.heads * d if fused else 0) + number * d
        return Receiver(name, kind, layer, self.exists(f"{block}.{modules[kind]}"),
                        norm=self.exists(f"{block}.{modules['norm']}"), columns=(start, start + d))

    def exists(self, path: str) -> str:
        try:
            self.shell.module.get_submodule(path)
        except AttributeError:
            raise PlanError(f"$.model.key: {echo(self.key)} has no module {path!r}, which edge patching "
                            "edits") from None
        return path


def each_edge(loaded, shell):
    """The document with an edge patch's ``"each"`` made a sweep axis ``edge``: one point per graph edge."""
    doc = loaded.document
    each = [name for name, spec in doc.edges.items() if spec.edges == "each"]
    if not each:
        return loaded
    g = EdgePatching(shell, None, doc.model.key).graph
    if doc.circuit is not None:
        check_circuit_sizes(doc.circuit, g)
    data = doc.model_dump(mode="json")
    data["edges"][each[0]]["edges"] = {"sweep": "edge"}
    data["sweep"] = {**data.get("sweep", {}), "edge": [[list(e)] for e in g.edges]}
    return dataclasses.replace(loaded, document=type(doc).model_validate(data))


def check_circuit_sizes(spec, g) -> None:
    """A circuit's sizes within the graph's edges; a circuit of one's own made of its edges, and reaching the
    logits from the input."""
    from causalab_core.results.circuit import reaches

    total = len(g.edges)
    for key in ("top", "connected"):
        k = getattr(spec.select, key)
        if k is not None and k > total:
            raise PlanError(f"$.circuit.select.{key}: {k} edges is more than the graph's {total}")
    for i, size in enumerate(spec.curve or ()):
        if size > total:
            raise PlanError(f"$.circuit.curve[{i}]: {size} edges is more than the graph's {total}")
    if spec.select.edges is not None:
        known = set(g.edges)
        for i, edge in enumerate(spec.select.edges):
            if tuple(edge) not in known:
                raise PlanError(f"$.circuit.select.edges[{i}]: {echo(list(edge))} is no edge of the graph ({g!r})")
        if not reaches([tuple(e) for e in spec.select.edges], list(g.edges)):
            raise PlanError("$.circuit.select.edges: no path of these edges leads from the input to the logits")
