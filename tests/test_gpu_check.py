"""scripts/gpu-check.sh where there is no CUDA (one line, exit 0), and the device plugin it runs the tests with.

The CUDA path itself runs only where a device is; CI never starts it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from causalab_hooks.engine import HooksEngine
from causalab_nnterp.engine import NnterpEngine
from causalab_testing.device import default_device_map

ROOT = Path(__file__).parent.parent


def test_without_cuda_the_gpu_check_says_why_in_one_line_and_exits_0():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no device, whatever this machine has
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1 and done.stdout.startswith("gpu-check: skipped: "), done.stdout
    assert done.stderr == ""


def test_the_device_plugin_gives_engines_made_without_a_device_its_device_and_undoes():
    assert HooksEngine().device_map is None
    undo = default_device_map("cuda")
    try:
        assert HooksEngine().device_map == NnterpEngine().device_map == "cuda"
        assert HooksEngine(device_map="cpu").device_map == "cpu"  # a test that names a device keeps it
        assert HooksEngine().options.optimize  # options still reach the engine
    finally:
        undo()
    assert HooksEngine().device_map is None
