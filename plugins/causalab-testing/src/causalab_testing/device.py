"""A pytest plugin (`-p causalab_testing.device`): engines made without a device load on `$CAUSALAB_TEST_DEVICE_MAP`.

`scripts/gpu-check.sh` runs the engine and site tests so, with `CAUSALAB_TEST_DEVICE_MAP=cuda`, unchanged.
An engine given a device (`HooksEngine(device_map="cpu")`, `api.run(..., device_map=...)`) keeps it, and
references a test builds itself (a plain forward, pyvene) stay where the test puts them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from causalab_core.plugins.contracts import Engine

VARIABLE = "CAUSALAB_TEST_DEVICE_MAP"


def default_device_map(chosen: str) -> Callable[[], None]:
    """From now on an engine made without a ``device_map`` gets ``chosen``; returns the undo."""
    original = Engine.__init__

    def init(self, *, device_map: str | None = None, options=None):
        original(self, device_map=chosen if device_map is None else device_map, options=options)

    Engine.__init__ = init

    def undo() -> None:
        Engine.__init__ = original

    return undo


def pytest_configure(config) -> None:
    chosen = os.environ.get(VARIABLE)
    if chosen:
        config.add_cleanup(default_device_map(chosen))


def pytest_report_header(config) -> str | None:
    chosen = os.environ.get(VARIABLE)
    return f"causalab engines load on device_map={chosen!r} ({VARIABLE})" if chosen else None
