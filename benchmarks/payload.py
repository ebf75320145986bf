"""Request payload of each shipped document, the block's code installed on the server vs shipped by value.

    .venv/bin/python benchmarks/payload.py            # one line per document, with the modules that travelled
    .venv/bin/python benchmarks/payload.py --table    # the rows of the ndif README's payload table

Serializes each request as the ndif engine sends it (zstd level 6, as nnsight
compresses), without a server: nnsight's local simulation builds the request
and this stops it once serialized. The ndif README's table is these rows, and
`plugins/causalab-ndif/tests/test_payload_table.py` measures them afresh and
holds the README to them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (document, how the README's table names it)
DOCUMENTS = [
    ("documents/real/weekdays_layer_sweep.json", "weekdays layer sweep"),
    ("documents/v2/entity_patch.json", "`entity_patch` (anchored)"),
    ("documents/v2/chat_turn.json", "`chat_turn`"),
    ("documents/real/weekdays_das.json", "`weekdays_das` (DAS training)"),
]


class Stop(Exception):
    pass


@dataclass
class Payload:
    document: str
    label: str
    points: int
    installed: int
    shipped: int
    modules: list[str]

    def row(self) -> str:
        """The README table's row: sizes in KB (1,000 bytes)."""
        kb = lambda n: f"{n / 1000:.1f} KB"  # noqa: E731
        return (f"| {self.label}, {self.points} point{'s' if self.points != 1 else ''} | {kb(self.installed)} | "
                f"{kb(self.shipped)} | +{kb(self.shipped - self.installed)} ({len(self.modules)} modules) |")


def _size(model, plan, classes, packages, **kw):
    import nnsight
    import zstandard
    from nnsight.schema.request import RequestModel

    from causalab_ndif.shipping import measured
    from causalab_nnterp import run_plan

    with measured(packages) as shipment:
        inner = RequestModel.__dict__["serialize"]

        def cap(cls, tracer, compress=False):
            blob = inner.__func__(cls, tracer, False)
            shipment.payload_bytes = len(zstandard.ZstdCompressor(level=6).compress(blob))
            raise Stop

        RequestModel.serialize = classmethod(cap)
        try:
            with model.session(remote="local"):
                nnsight.save(run_plan(model, plan, None, classes, **kw))
        except Stop:
            pass
    return shipment


def measure(document: str, label: str = "") -> Payload:
    """One document's request, both ways."""
    import torch

    import causalab_core
    from causalab_core.api import featurizer_classes
    from causalab_core.plugins.registry import registry
    from causalab_ndif.shipping import PlainModel, shipped_packages
    from causalab_nnterp import ServedTransformer, by_module_path

    plan = causalab_core.plan(ROOT / document)
    classes = featurizer_classes(plan, registry())
    ref = dict(key=plan.model.key, revision=plan.model.revision, dtype=torch.float32)
    installed = _size(ServedTransformer(plan.model.source, **ref), plan, classes, ())
    shipped = _size(PlainModel(plan.model.source, **ref), plan, classes, shipped_packages(classes),
                    site_tensor=by_module_path)
    return Payload(document, label, len(plan.points), installed.payload_bytes, shipped.payload_bytes,
                   sorted(shipped.modules))


def main() -> None:
    for document, label in DOCUMENTS:
        p = measure(document, label)
        if "--table" in sys.argv:
            print(p.row())
        else:
            print(f"{Path(document).name:32} points {p.points:3} installed {p.installed:8,} shipped {p.shipped:8,} "
                  f"(+{p.shipped - p.installed:,}) modules {len(p.modules)}: {', '.join(p.modules)}")


if __name__ == "__main__":
    main()
