"""The model object the nnterp engine traces: nnterp's ``StandardizedTransformer``, servable by NDIF.

nnsight names a remote deployment by the wrapper class and a key. A plain
``StandardizedTransformer`` inherits ``LanguageModel``'s remote identity, so an
NDIF server would load a bare ``TransformersModel`` and the session block,
which reaches sites by nnterp's names (``layers_output`` ...), would find none
of them. This subclass names itself, so the server rebuilds the same wrapper
(importing this module applies the nnterp shim there too), and its key is the
document's model key and revision, never a local path: resolving it needs no
Hub lookup on either side.
"""

from __future__ import annotations

import json

from transformers import AutoTokenizer

from causalab_nnterp.compat import import_nnterp

StandardizedTransformer = import_nnterp().StandardizedTransformer

TASK = "text-generation"


class ServedTransformer(StandardizedTransformer):
    """nnterp's standardized model, loaded from ``source``, known remotely as ``key`` at ``revision``."""

    def __init__(self, source, *, key: str | None = None, revision: str | None = None, **kwargs):
        tokenizer = AutoTokenizer.from_pretrained(source, revision=revision, local_files_only=True)
        super().__init__(source, tokenizer=tokenizer, revision=revision, **kwargs)
        self._served_as = json.dumps({"repo_id": key or str(source), "revision": revision, "task": TASK})

    def _remoteable_class(self) -> type:
        return ServedTransformer

    def _remoteable_model_key(self) -> str:
        return self._served_as

    @classmethod
    def _remoteable_from_model_key(cls, model_key: str, **kwargs) -> "ServedTransformer":
        data = json.loads(model_key)
        return cls(data["repo_id"], key=data["repo_id"], revision=data["revision"], **kwargs)


def served_key(key: str, revision: str | None) -> str:
    """The full remote key a server deploys for a document's model key and revision."""
    suffix = json.dumps({"repo_id": key, "revision": revision, "task": TASK})
    return f"{ServedTransformer.__module__}.{ServedTransformer.__qualname__}:{suffix}"
