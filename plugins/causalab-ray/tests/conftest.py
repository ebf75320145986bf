"""One Ray cluster for the whole session: two CPUs on 127.0.0.1, started as `--workers` starts one.

The test process is its driver, so in-process runs (``api.run(workers=2)``) use it
as a notebook's own cluster; command-line runs reach it with ``--ray-address``.
Its session files live in the test's temporary folder.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    from causalab_ray.cluster import start_local

    before = {k: v for k, v in os.environ.items() if k.startswith("RAY_")}
    cluster = start_local(cpus=2, temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield cluster
    cluster.close()
    # Ray leaves its settings in this process's environment (RAY_AUTH_MODE=token): later tests' processes
    # do not inherit them.
    for key in [k for k in os.environ if k.startswith("RAY_")]:
        del os.environ[key]
    os.environ.update(before)
