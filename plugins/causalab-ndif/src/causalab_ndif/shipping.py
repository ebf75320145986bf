"""Code by value: a block run on an NDIF server that has no causalab installed, its code shipped with the request.

The server needs only torch, transformers, pydantic and nnsight. The client
names the deployment by nnsight's own model key of the document's checkpoint
(``nnsight.modeling.transformers.TransformersModel:{repo_id, revision, task}``),
the block reaches sites by the module paths the compiler recorded
(``causalab_nnterp`` ``by_module_path``: no nnterp names), and every function
and class of causalab's that the block touches travels by value (cloudpickle's
by-value registration, which nnsight's serializer honours, shipping source).
Only what the block references is pickled, so only the modules it imports
travel; :class:`Shipment` records which, with a digest of their sources, and
the request's size.
"""

from __future__ import annotations

import contextlib
import copyreg
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nnsight.modeling.transformers import TransformersModel

from causalab_ndif.preflight import SERVER_PACKAGES, public

TASK = "text-generation"
# The packages whose code a block uses besides the featurizers' own.
BLOCK_PACKAGES = ("causalab_core", "causalab_nnterp")


class PlainModel(TransformersModel):
    """The document's checkpoint as plain nnsight, known remotely as nnsight's ``TransformersModel``
    at the document's key and revision (never a local path: neither side asks the Hub)."""

    def __init__(self, source, *, key: str, revision: str | None, **kwargs):
        super().__init__(str(source), task=TASK, **kwargs)
        self._served_as = json.dumps({"repo_id": key, "revision": revision, "task": TASK})

    def _remoteable_class(self) -> type:
        return TransformersModel

    def _remoteable_model_key(self) -> str:
        return self._served_as

    def __reduce_ex__(self, protocol):
        # The request pickles the model object too: as nnsight's own class, which a server has.
        _, _, *state = super().__reduce_ex__(protocol)
        return (copyreg._reconstructor, (TransformersModel, object, None), *state)


def server_requirements() -> dict[str, str | None]:
    """``{package: version}`` a server needs for a shipped block: :data:`SERVER_PACKAGES` at this client's versions."""
    from causalab_core.plugins.provenance import watched_versions

    return {name: public(version) for name, version in watched_versions().items() if name in SERVER_PACKAGES}


def plain_key(key: str, revision: str | None) -> str:
    """The remote key a server without causalab deploys for a document's model key and revision."""
    from nnsight.util import to_import_path

    return f"{to_import_path(TransformersModel)}:{json.dumps({'repo_id': key, 'revision': revision, 'task': TASK})}"


def shipped_packages(classes) -> tuple[str, ...]:
    """The top-level packages whose code may travel: core, the block's, and each featurizer class's."""
    return tuple(sorted({*BLOCK_PACKAGES, *(cls.__module__.split(".")[0] for cls in classes.values())}))


@dataclass
class Shipment:
    """What one request carried: the modules whose code went by value, the payload's size in bytes (as
    sent, compressed where nnsight compresses), and the size of the result that came back."""

    modules: set[str] = field(default_factory=set)
    payload_bytes: int | None = None
    received_bytes: int | None = None

    def record(self) -> dict:
        """run.json's ``code``: how the code travelled and, shipped, exactly what. The same for every chunk
        of a run (the payload's size is not: it grows with a chunk's points, so it is not recorded here)."""
        if not self.modules:
            return {"travelled": "installed"}
        return {"travelled": "by value", "modules": sorted(self.modules), "digest": self.digest()}

    def digest(self) -> str:
        """sha256 over each shipped module's name and source file, in name order."""
        total = hashlib.sha256()
        for name in sorted(self.modules):
            total.update(name.encode() + b"\0" + hashlib.sha256(Path(sys.modules[name].__file__).read_bytes()).digest())
        return total.hexdigest()


@contextlib.contextmanager
def measured(packages: tuple[str, ...] = ()):
    """For the body, exactly ``packages`` of causalab's pickle by value (recording which of their modules
    did), and the request's payload size and its result's are kept; everything is put back after.

    nnsight registers, once per process, every package importable from outside site-packages (an
    editable install included) to travel by value; left alone, an editable causalab would ship itself
    even to a server that has it installed. So a request that uses the server's installed copy ships
    no causalab code, and a shipped one ships what it names.
    """
    import cloudpickle
    from cloudpickle import cloudpickle as internals
    from nnsight.intervention.backends.remote import RemoteBackend
    from nnsight.ndif import pull_env
    from nnsight.schema.request import RequestModel

    pull_env()  # nnsight's own registrations happen now, not inside the request
    by_value = internals._PICKLE_BY_VALUE_MODULES
    theirs = {name for name in by_value if name.split(".")[0].startswith("causalab")}
    shipment = Shipment()
    is_by_value = internals._is_registered_pickle_by_value
    serialize = RequestModel.__dict__["serialize"]

    def recording(module):
        found = is_by_value(module)
        if found and module.__name__.split(".")[0] in packages:
            shipment.modules.add(module.__name__)
        return found

    def sized(cls, tracer, compress=False):
        blob = serialize.__func__(cls, tracer, compress)
        shipment.payload_bytes = len(blob)
        return blob

    finalize = RemoteBackend.__dict__["finalize"]

    def received(self, content):  # every route a result's bytes arrive by ends here, still as sent
        shipment.received_bytes = (shipment.received_bytes or 0) + len(content)
        return finalize(self, content)

    by_value -= theirs
    for name in packages:
        cloudpickle.register_pickle_by_value(sys.modules[name])
    internals._is_registered_pickle_by_value = recording
    RequestModel.serialize = classmethod(sized)
    RemoteBackend.finalize = received
    try:
        yield shipment
    finally:
        RemoteBackend.finalize = finalize
        RequestModel.serialize = serialize
        internals._is_registered_pickle_by_value = is_by_value
        by_value -= set(packages)
        by_value |= theirs


def run_shipped(model, plan, batch_size, classes, remote, *, optimize=True, positions=False, backend=None):
    """The session with causalab's code shipped by value. It loads only its arguments, torch and nnsight.
    With a non-blocking ``backend``, the job is only sent: ``(its id, None, shipment)``."""
    import nnsight

    from causalab_nnterp import by_module_path, run_plan

    with measured(shipped_packages(classes)) as shipment:
        with model.session(remote=remote, backend=backend):
            served = nnsight.save({"served_dtype": str(model.lm_head.weight.dtype)})
            results = nnsight.save(run_plan(model, plan, batch_size, classes, site_tensor=by_module_path,
                                            optimize=optimize, positions=positions))
    if backend is not None and not backend.blocking:
        return backend.job_id, None, shipment
    return results, served, shipment
