"""The ndif README's payload table is what `benchmarks/payload.py` measures now: sizes within 5%, modules exact."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "plugins/causalab-ndif/README.md"
ROW = re.compile(r"^\| (?P<label>.+), (?P<points>\d+) points? \| (?P<installed>[\d.]+) KB \| (?P<shipped>[\d.]+) KB \| "
                 r"\+(?P<share>[\d.]+) KB \((?P<modules>\d+) modules\) \|$")


def payload():
    spec = importlib.util.spec_from_file_location("payload", ROOT / "benchmarks/payload.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def readme_rows() -> dict[str, re.Match]:
    return {m["label"]: m for m in map(ROW.match, README.read_text().splitlines()) if m}


def test_the_readme_payload_table_is_measured_afresh():
    bench = payload()
    rows = readme_rows()
    assert sorted(rows) == sorted(label for _, label in bench.DOCUMENTS), "the README's table lists other documents"
    for document, label in bench.DOCUMENTS:
        measured, said = bench.measure(document, label), rows[label]
        assert int(said["points"]) == measured.points, label
        assert int(said["modules"]) == len(measured.modules), (label, measured.modules)
        for column, value in (("installed", measured.installed), ("shipped", measured.shipped),
                              ("share", measured.shipped - measured.installed)):
            assert float(said[column]) * 1000 == pytest.approx(value, rel=0.05), (
                f"{label}: the README says {said[column]} KB {column}, measured {value:,} bytes; "
                f"update it from `benchmarks/payload.py --table`")
