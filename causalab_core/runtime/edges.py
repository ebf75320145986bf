"""Edge and path patching (``ir.EdgePatch``): the one place an engine computes what patched edges change.

Per batch, an engine makes a ``Patching`` and hands its ``at`` each (module, tensor) of ``visits(patch)`` in
the order the forward reaches them; ``at`` returns the tensor the forward goes on with. Senders' terms are
kept as they pass. A receiver reads its stream plus, for each patched edge into it, the sender's patched
term less the term the run computed; a head's query, key or value input is recomputed from that stream
through the block's first norm (from its weights) and its columns of the projection. Path patching starts from the clean run's
stream and terms instead (``Patching(..., clean=...)``, after a ``Patching(..., recording=True)`` pass).

The sums run in float32 outside any autocast, in the plan's edge order, so every engine gets the same bytes.
``modules(path)`` gives a module by its dotted path: a torch module (hooks) or an nnsight envoy, called on a
tensor and read for ``weight`` and ``bias``. Imported inside engines' blocks: torch and causalab_core only.
"""

from __future__ import annotations

import torch

from causalab_core.errors import EngineError
from causalab_core.ir.nodes import EdgePatch
from causalab_core.runtime.interventions import resolved_values

STAGE = {"input": 0, "stream": 1, "q": 2, "k": 3, "v": 4, "head": 5, "mlp": 6, "mlp_term": 7}
"""The order of a block's tensors in its forward (a sequential block: ``ir.graph.SEQUENTIAL``)."""


def visits(patch) -> list[tuple[str, str]]:
    """Every (module, tensor) the patch reads or edits, in the order the forward reaches them."""
    stage: dict[tuple[str, str], tuple[int, int]] = {}

    def add(module, tensor, layer, name):
        key = (module, tensor)
        stage[key] = min(stage.get(key, (layer, STAGE[name])), (layer, STAGE[name]))

    for sender in patch.senders:
        name = {"block_input": "input", "head": "head", "mlp_output": "mlp_term"}[sender.site.component]
        add(sender.site.module, sender.site.tensor, sender.site.layer, name)
    for receiver in patch.receivers:
        if receiver.norm is not None:
            add(receiver.norm, "input", receiver.layer, "stream")
            add(receiver.module, "output", receiver.layer, receiver.kind)
        else:
            add(receiver.module, "input", receiver.layer, "mlp" if receiver.kind == "mlp" else "input")
    return sorted(stage, key=stage.get)


class Patching:
    """One batch (rows ``span``, left padding ``offsets``) of a run that patches edges."""

    def __init__(self, patch, store, span: slice, offsets, modules, *, clean: dict | None = None,
                 recording: bool = False):
        self.patch, self.store, self.span, self.offsets, self.modules = patch, store, span, offsets, modules
        self.clean, self.recording = clean, recording
        self.terms: dict[int, torch.Tensor] = {}
        """Sender index -> its term in this run ``[batch, seq, width]``, float32."""
        self.streams: dict[str, torch.Tensor] = {}
        """Module path -> the stream entering it (a receiver's), float32."""
        self.sources: dict[int, torch.Tensor] = {}
        self.into = {r: [s for s, r2 in patch.edges if r2 == r] for r in range(len(patch.receivers))}
        self.senders_at: dict[tuple[str, str], list[int]] = {}
        for i, sender in enumerate(patch.senders):
            self.senders_at.setdefault((sender.site.module, sender.site.tensor), []).append(i)
        self.receivers_at: dict[tuple[str, str], list[int]] = {}
        self.streams_at: set[str] = set()
        for i, receiver in enumerate(patch.receivers):
            if receiver.norm is not None:
                self.streams_at.add(receiver.norm)
                self.receivers_at.setdefault((receiver.module, "output"), []).append(i)
            else:
                self.receivers_at.setdefault((receiver.module, "input"), []).append(i)

    def kept(self) -> dict:
        """What a recording pass saw: the clean terms and streams a path patch starts from."""
        return {"terms": self.terms, "streams": self.streams}

    def at(self, module: str, tensor: str, value: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=value.device.type, enabled=False):
            for i in self.senders_at.get((module, tensor), ()):
                self.terms[i] = self.term(i, value)
            if tensor == "input" and module in self.streams_at:
                self.streams[module] = value.float()
            receivers = self.receivers_at.get((module, tensor), ())
            if not receivers:
                return value
            if tensor == "input":  # an MLP's or the logits' norm: the stream itself
                (receiver,) = receivers
                if self.recording:
                    self.streams[module] = value.float()
                    return value
                return self.patched(receiver, value.float()).to(value.dtype)
            if self.recording:
                return value
            edited = value.clone()
            for receiver in receivers:
                r = self.patch.receivers[receiver]
                normed = normalized(self.modules(r.norm), self.patched(receiver, self.streams[r.norm]).to(value.dtype))
                start, stop = r.columns
                edited[..., start:stop] = projected(self.modules(r.module), normed, start, stop).to(value.dtype)
            return edited

    def patched(self, receiver: int, stream: torch.Tensor) -> torch.Tensor:
        """The stream a receiver reads: its own (the clean run's, for a path patch) with each patched sender's
        term replaced by its source's."""
        r = self.patch.receivers[receiver]
        own, terms = (stream, self.terms) if self.clean is None else \
            (self.clean["streams"][r.norm or r.module], self.clean["terms"])
        out = own
        for sender in self.into[receiver]:
            out = out + (self.source(sender) - terms[sender])
        return out

    def term(self, sender: int, value: torch.Tensor) -> torch.Tensor:
        """A sender's term in the stream from its site's tensor (a head's: its slice through the projection)."""
        s = self.patch.senders[sender]
        if s.site.component != "head":
            return value.float()
        d = s.site.width
        return head_term(self.modules(s.projection), value[..., s.site.head * d:(s.site.head + 1) * d].float(),
                         s.site.head, d)

    def source(self, sender: int) -> torch.Tensor:
        """The sender's patched term on this batch: the source run's, its mean, or zero."""
        if sender not in self.sources:
            self.sources[sender] = source_term(self.patch, sender, self.store, self.span, self.offsets,
                                               self.terms[sender], self.modules)
        return self.sources[sender]


def source_term(patch, sender: int, store, span: slice, offsets, own: torch.Tensor, modules) -> torch.Tensor:
    """Sender ``sender``'s patched term on a batch (``own``: its term in the run, for the shape and device)."""
    s, kind = patch.senders[sender], patch.ablation
    if kind == "zero":
        return torch.zeros_like(own)
    if kind == "mean":
        mean = resolved_values(store, patch.reads[sender], patch.name, "mean").mean(0).to(own.device)
        return to_term(s, mean, modules).expand_as(own)
    padded = own.new_zeros((*own.shape[:2], s.site.width))
    for b, (row, offset) in enumerate(zip(store[patch.reads[sender]][span], offsets)):
        if row is None or offset + len(row) != own.shape[1]:
            raise EngineError(f"edge patch {patch.name!r}: sender {s.name!r}'s source on a row is not as long "
                              "as the patched prompt")
        padded[b, offset:] = row.float().to(own.device)
    return to_term(s, padded, modules)


def to_term(sender, value: torch.Tensor, modules) -> torch.Tensor:
    """A sender's term from its site's value (a head's through its columns of the output projection)."""
    if sender.site.component != "head":
        return value
    return head_term(modules(sender.projection), value, sender.site.head, sender.site.width)


class Probe(Patching):
    """A pass for edge attribution (EAP, Syed et al. 2023): every receiver reads its stream plus a zero that
    requires grad (``leaves``, by receiver name), so one backward per score gives the gradient at every
    receiver's input at once; the senders' terms are kept (detached).

    ``alpha`` > 0 (EAP-IG, Hanna et al. 2024, with the edges moved together as auto-circuit's masks are):
    each receiver reads its stream plus ``alpha`` of every patched edge's change into it (the sender's patched
    term less its term in this pass), from ``store`` (the reads ``union`` joined); ``edge_estimate`` then
    weighs each pass's gradient by that pass's change, the gradient by the edge's weight on the path."""

    def __init__(self, patch, span: slice, offsets, modules, *, alpha: float = 0.0, store=None):
        super().__init__(patch, store, span, offsets, modules)
        self.alpha = alpha
        self.leaves: dict[str, torch.Tensor] = {}

    def patched(self, receiver: int, stream: torch.Tensor) -> torch.Tensor:
        name = self.patch.receivers[receiver].name
        self.leaves[name] = torch.zeros_like(stream, requires_grad=True)
        if self.alpha:
            for sender in self.into[receiver]:
                stream = stream + self.alpha * (self.source(sender) - self.terms[sender])
        return stream + self.leaves[name]


def union(patches, stores=None) -> tuple[EdgePatch, dict]:
    """One patch with every sender, receiver and edge of ``patches`` (named alike), for one probe of them all;
    with ``stores`` (each patch's run's), its senders' reads too and one store holding them, for a probe that
    moves the edges (``Probe(alpha=...)``): a sender patched two ways (another source, kind or read) cannot."""
    senders = {s.name: s for p in patches for s in p.senders}
    receivers = {r.name: r for p in patches for r in p.receivers}
    names = sorted({(p.senders[s].name, p.receivers[r].name) for p in patches for s, r in p.edges})
    order_s, order_r = list(senders), list(receivers)
    reads, store, kinds = {}, {}, {p.ablation for p in patches}
    for p, own in zip(patches, stores or ()):
        for i, s in enumerate(p.senders):
            read = p.reads[i] if p.reads else None  # one read name is one read of one source run
            if reads.setdefault(s.name, read) != read:
                raise EngineError(f"edge patch {p.name!r}: sender {s.name!r} is patched from two sources, which "
                                  "integrated gradients cannot move along one path")
            if read is not None:
                store.setdefault(read, own[read])
    if stores is not None and len(kinds) > 1:
        raise EngineError(f"edge patches {', '.join(sorted(p.name for p in patches))} patch by {' and '.join(sorted(kinds))}, "
                          "which integrated gradients cannot move along one path")
    joined = EdgePatch("probe", tuple(senders.values()), tuple(receivers.values()),
                       tuple((order_s.index(s), order_r.index(r)) for s, r in names),
                       ablation=next(iter(kinds)) if stores is not None else "swap",
                       reads=tuple(reads[n] for n in senders) if stores is not None and all(reads.values()) else ())
    return joined, store


def path_probes(patch, store, span: slice, offsets, modules, steps: int) -> list[Probe]:
    """The probes of the path's other points, ``k / steps`` of the way for ``k = 1 .. steps - 1``."""
    return [Probe(patch, span, offsets, modules, alpha=k / steps, store=store) for k in range(1, steps)]





def edge_estimate(step, span: slice, offsets, clean: dict, passes: list, store) -> dict:
    """An estimated edge run's scores on rows ``span`` (as ``attribution.estimate``'s): the clean scores plus,
    for each patched edge, (the sender's patched term - its term) . d score / d (the receiver's input), summed
    over positions (padding changes nothing), and averaged over ``passes``: (probe, gradients) of the clean
    pass and, for integrated gradients, of each other point of the path, each with its own terms (the
    gradient of the score by the edge's weight along the path, as auto-circuit's masks take it)."""
    patch = step.edges
    change = torch.zeros(span.stop - span.start, len(next(iter(passes[0][1].values()))), dtype=torch.float64)
    with torch.no_grad():
        sources = {}
        for probe, grads in passes:
            terms = {probe.patch.senders[i].name: t.detach() for i, t in probe.terms.items()}
            diffs = {}
            for s, r in patch.edges:
                sender = patch.senders[s]
                if s not in diffs:
                    own = terms[sender.name]
                    if s not in sources:
                        sources[s] = source_term(patch, s, store, span, offsets, own, probe.modules)
                    diff = sources[s] - own
                    for b, offset in enumerate(offsets):
                        diff[b, :offset] = 0
                    diffs[s] = diff
                g = grads[patch.receivers[r].name]  # [scores, rows, positions, width]
                change += torch.einsum("bpd,sbpd->bs", diffs[s], g).double().cpu()
        change /= len(passes)
    if step.combinations is not None:
        change = change @ torch.linalg.pinv(torch.tensor(step.combinations, dtype=torch.float64)).T
    columns = clean["answer_logits"].shape[1]
    return {"answer_logits": (clean["answer_logits"].double() + change[:, :columns]).float(),
            "logsumexp": (clean["logsumexp"].double() + change[:, columns]).float(),
            "clean_answer_logits": clean["answer_logits"], "clean_logsumexp": clean["logsumexp"]}


def normalized(norm, x: torch.Tensor) -> torch.Tensor:
    """The block's first norm of ``x``, computed from its weights as the family's module computes it (calling
    the module would run the hooks an engine has on it): an RMS norm (Llama, Mistral, Qwen) or GPT-2's
    ``LayerNorm``."""
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None:
        return torch.nn.functional.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return norm.weight * h.to(x.dtype)


def head_term(projection, z: torch.Tensor, head: int, d: int) -> torch.Tensor:
    """Head ``head``'s output ``z`` (``[..., d]``) through its columns of the output projection, without bias."""
    weight = projection.weight.float()
    if linear(projection):
        return z @ weight[:, head * d:(head + 1) * d].T
    return z @ weight[head * d:(head + 1) * d, :]


def projected(projection, normed: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Columns ``start:stop`` of a projection of ``normed`` (a ``Linear``, or GPT-2's transposed ``Conv1D``)."""
    weight, bias = projection.weight, projection.bias
    if linear(projection):
        return torch.nn.functional.linear(normed, weight[start:stop], None if bias is None else bias[start:stop])
    flat = torch.addmm(bias[start:stop], normed.reshape(-1, normed.shape[-1]), weight[:, start:stop])
    return flat.reshape(*normed.shape[:-1], stop - start)


def linear(projection) -> bool:
    """Whether a projection keeps its weight as ``[out, in]`` (``torch.nn.Linear``) rather than ``[in, out]``
    (transformers' ``Conv1D``, which records its output width as ``nf``)."""
    return getattr(projection, "nf", None) is None
