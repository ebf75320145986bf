"""A worker: an actor holding its own registry and local engine; the plan arrives once, then chunks as indices.

Each chunk runs, is scored and is laid out as files exactly as the client's own
``api.run`` does it for a chunk (``score.score``, ``score.output_files``),
so its points' files are the bytes a one-process run keeps. What travels back is
the chunk's point files (metric JSON, trained featurizers) and the engine's
details, never tensors.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import replace
from typing import Any


class ChunkWorker:
    """One model load per worker: the engine instance keeps its loaded weights between chunks."""

    def __init__(self, engine: str, options: dict[str, Any], device_map: str | None, batch_size: int | None,
                 threads: int | None):
        if threads:
            import torch

            torch.set_num_threads(threads)
        self.engine, self.options, self.device_map, self.batch_size = engine, options, device_map, batch_size
        self.plan = None

    def alive(self) -> bool:
        """Answered in its own concurrency group, beside a chunk that runs: a worker whose process is gone
        cannot answer (the client asks the others when one dies)."""
        return True

    def about(self) -> dict[str, Any]:
        """Who this worker is, and the causalab it would run (the client compares it with its own)."""
        import ray

        from causalab_core.plugins.registry import installed_causalab
        from causalab_core.plugins.provenance import arithmetic

        devices = [str(d) for d in ray.get_gpu_ids()]
        return {"node": ray.util.get_node_ip_address(), "host": socket.gethostname(), "pid": os.getpid(),
                "python": sys.version.split()[0], "ray": ray.__version__, "gpus": devices,
                "arithmetic": arithmetic(), "causalab": installed_causalab()}

    def setup(self, plan: Any) -> None:
        """Keep the plan and build the engine (weights load with the first chunk, once)."""
        from causalab_core.api import featurizer_classes
        from causalab_core.plugins.registry import registry

        reg = registry()
        with reg.boundary():
            cls = reg.get("engine", self.engine, "--engine")
            self.runner = cls(device_map=self.device_map, options=cls.Options.model_validate(self.options))
            self.classes = featurizer_classes(plan, reg)
        self.plan = plan

    def run(self, chunk: list[int]) -> tuple[dict[str, bytes], dict[str, Any]]:
        """Run the plan's points ``chunk``: their files (by path in the output folder) and the engine's details."""
        from causalab_core.plugins.registry import registry
        from causalab_core.plugins.provenance import run_record
        from causalab_core.results.score import output_files, score

        reg = registry()
        part = replace(self.plan, points=tuple(self.plan.points[i] for i in chunk))
        with reg.boundary():
            outputs = self.runner.execute(part, featurizers=self.classes, remote=False, batch_size=self.batch_size)
            metrics = score(part, outputs, reg)
            record = run_record(reg, engine=self.engine, remote=False, batch_size=self.batch_size, plan=part,
                                details=self.runner.details)
            files = output_files(part, metrics, record, outputs)
        return ({rel: data for rel, data in files.items() if rel not in ("document.json", "run.json")},
                dict(self.runner.details))
