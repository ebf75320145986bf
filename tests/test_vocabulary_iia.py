"""documents/README.md's figures for IIA over the vocabulary, against a fresh run of the weekdays sweep."""

from __future__ import annotations

import json
import re
from pathlib import Path

from causalab_core import api, load

ROOT = Path(__file__).parent.parent


def test_the_weekdays_answer_over_the_vocabulary_is_what_the_readme_says(tmp_path):
    text = " ".join((ROOT / "documents" / "README.md").read_text().split())
    said = re.search(r"blocks 2-4 reads ([\d.]+) / ([\d.]+) / ([\d.]+); over the vocabulary ([\d.]+) / ([\d.]+) / "
                     r"([\d.]+), with (\d+) / (\d+) / (\d+) of the 60 rows", text)
    assert said, "the README's sentence on IIA over the vocabulary"
    figures = [float(x) for x in said.groups()]
    doc = json.loads((ROOT / "documents" / "real" / "weekdays_layer_sweep.json").read_text())
    answer = doc["metrics"]["iia_answer"]
    doc["metrics"] = {"among": answer, "vocab": {**answer, "over": "vocabulary"}}
    doc["sweep"] = {"layer": [2, 3, 4], "pos": [-1]}
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    api.run(path, out=tmp_path / "o")
    found = {(s["layer"], s["metric"]): s for s in load(tmp_path / "o").records["summaries"]}
    for i, layer in enumerate((2, 3, 4)):
        assert abs(found[(layer, "among")]["mean"] - figures[i]) <= 0.005 + 1e-9
        assert abs(found[(layer, "vocab")]["mean"] - figures[3 + i]) <= 0.005 + 1e-9
        assert found[(layer, "vocab")]["no_choice"] == figures[6 + i]
