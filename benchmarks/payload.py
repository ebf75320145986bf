"""Request payload of each shipped document, the block's code installed on the server vs shipped by value.

    .venv/bin/python benchmarks/payload.py

Serializes each request as the ndif engine sends it (zstd level 6, as nnsight
compresses), without a server: nnsight's local simulation builds the request
and this stops it once serialized. Prints the payload in bytes per mode, the
cost of the shipped code, and which packages' modules travelled.
"""

import dataclasses, torch, causalab_core, nnsight, zstandard
from causalab_core.api import featurizer_classes
from causalab_core.plugins import registry
from nnsight.schema.request import RequestModel
from causalab_ndif.shipping import PlainModel, measured, shipped_packages
from causalab_nnterp import ServedTransformer, run_plan, by_module_path

class Stop(Exception): pass
def size(model, plan, classes, packages, **kw):
    with measured(packages) as shipment:
        inner = RequestModel.__dict__["serialize"]
        def cap(cls, tracer, compress=False):
            blob = inner.__func__(cls, tracer, False)
            shipment.payload_bytes = len(zstandard.ZstdCompressor(level=6).compress(blob)); raise Stop
        RequestModel.serialize = classmethod(cap)
        try:
            with model.session(remote="local"):
                r = nnsight.save(run_plan(model, plan, None, classes, **kw))
        except Stop: pass
    return shipment
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
for doc in ["documents/real/weekdays_layer_sweep.json", "documents/v2/entity_patch.json", "documents/v2/chat_turn.json", "documents/real/weekdays_das.json"]:
    plan = causalab_core.plan(ROOT / doc)
    classes = featurizer_classes(plan, registry())
    m = PlainModel(plan.model.source, key=plan.model.key, revision=plan.model.revision, dtype=torch.float32)
    s = ServedTransformer(plan.model.source, key=plan.model.key, revision=plan.model.revision, dtype=torch.float32)
    a = size(s, plan, classes, ())
    b = size(m, plan, classes, shipped_packages(classes), site_tensor=by_module_path)
    print(f"{doc.split('/')[-1]:32} points {len(plan.points):3} installed {a.payload_bytes:8,} shipped {b.payload_bytes:8,} (+{b.payload_bytes-a.payload_bytes:,}) modules {len(b.modules)} packages {shipped_packages(classes)}")
