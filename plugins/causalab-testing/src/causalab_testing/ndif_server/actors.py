"""The two ndif 0.1.2 classes a CPU-only test server needs, named by ``NDIF_*_IMPORT_PATH``.

Why they exist:

- ``CPUModelActor``: the stock model actor loads weights onto the GPUs the
  controller assigned and calls CUDA-only functions (``torch.cuda.synchronize``,
  ``set_device``, a placement check that insists on CUDA tensors). This one
  loads on the CPU and skips those calls; requests run through the stock code.
- ``CPUControllerActor``: the stock controller's model evaluator calls nnsight's
  ``describe_checkpoint``/``max_tp_size`` with a ``trust_remote_code`` argument
  that nnsight 0.8.1 no longer takes, which fails every deploy's description.
  This one hands the evaluator a shim that drops the argument, and sizes a
  checkpoint from its config alone: the test server is offline, and nnsight
  would otherwise ask the Hub for a parameter count and give up describing it
  (then ``/status`` cannot say which model key or dtype a deployment serves).

Nothing else about the server is changed.
"""

from __future__ import annotations

import gc
import logging

import ray
from ndif.services.ray.deployments.controller.cluster import evaluator
from ndif.services.ray.deployments.controller.controller import _ControllerActor
from ndif.services.ray.deployments.modeling.base import BaseModelDeployment
from nnsight.modeling.huggingface import HuggingFaceModel
from nnsight.modeling.mixins.remotable import Remotable

logger = logging.getLogger("ndif.modeling")


class CPUModelDeployment(BaseModelDeployment):
    """The stock model actor, with the weights on the CPU."""

    CACHEABLE = False

    def load_from_disk(self):
        # A server with causalab serves its nnterp wrapper (importing it applies the nnterp shim); one
        # without causalab serves plain nnsight models, whose keys need nothing imported.
        try:
            import causalab_nnterp
        except ImportError:
            pass
        else:
            causalab_nnterp.ServedTransformer  # noqa: B018  (imports the wrapper, which applies the nnterp shim)

        model = HuggingFaceModel.from_model_key(self.model_key, dispatch=True, dtype=self.dtype_name, **self.kwargs)
        model._module.requires_grad_(False)
        logger.info(f"Loaded {self.model_key} on the CPU")
        return model

    async def to_cache(self) -> None:
        await self.cancel("preempted")
        self.cached = True

    def from_cache(self, gpu_mem_bytes_by_id) -> None:
        self.gpu_mem_bytes_by_id = gpu_mem_bytes_by_id
        self.cached = False

    def cleanup(self) -> None:
        self.kill_switch.clear()
        self.kill_reason = None
        self.execution_ident = None
        self.model.interleaver.cancel()
        gc.collect()


CPUModelActor = ray.remote(num_cpus=0, max_restarts=-1)(CPUModelDeployment)


class _Remotable081:
    """nnsight 0.8.1's ``Remotable`` as ndif 0.1.2's evaluator calls it."""

    @staticmethod
    def describe_checkpoint(model_key, dtype, trust_remote_code=False):
        return Remotable.describe_checkpoint(model_key, dtype)

    @staticmethod
    def max_tp_size(model_key, trust_remote_code=False):
        return Remotable.max_tp_size(model_key)


class _CPUController(_ControllerActor):
    def __init__(self, *args, **kwargs):
        evaluator.Remotable = _Remotable081
        HuggingFaceModel._hub_parameter_count = staticmethod(lambda repo_id, revision: None)
        super().__init__(*args, **kwargs)


CPUControllerActor = ray.remote(num_cpus=0, num_gpus=0, max_restarts=-1, resources={"head": 1})(_CPUController)
