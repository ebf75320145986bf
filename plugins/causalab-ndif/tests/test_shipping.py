"""Shipping a block by value, without a server: nnsight's local simulation hides every causalab module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import causalab_core
from causalab_core.api import featurizer_classes
from causalab_core.plugins.registry import registry

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def plain_model():
    from causalab_ndif.shipping import PlainModel

    plan = causalab_core.plan(ROOT / "documents/v2/entity_patch.json")
    model = PlainModel(plan.model.source, key=plan.model.key, revision=plan.model.revision, dispatch=True,
                       dtype=torch.float32)
    model._module.requires_grad_(False)
    return plan, model


def test_a_shipped_block_unpickled_where_causalab_is_hidden_gives_the_nnterp_engines_tensors(plain_model):
    from causalab_ndif.shipping import plain_key, run_shipped
    from causalab_nnterp import NnterpEngine

    plan, model = plain_model
    classes = featurizer_classes(plan, registry())
    results, served, shipment = run_shipped(model, plan, None, classes, "local")
    expected = NnterpEngine().execute(plan, featurizers=classes)
    assert sorted(results) == sorted(expected)
    assert [(path, name) for path in expected for name in expected[path]
            if not torch.equal(expected[path][name], results[path][name])] == []
    assert served == {"served_dtype": "torch.float32"}
    assert model.to_model_key() == plain_key("causalab-toy/entity", plan.model.revision)
    assert model.to_model_key().startswith("nnsight.modeling.transformers.TransformersModel:")
    assert shipment.record()["travelled"] == "by value" and shipment.payload_bytes > 0


def test_after_a_shipped_request_nothing_of_causalab_ships_unasked(plain_model):
    """nnsight registers editable installs to travel by value; a request for the installed code sends none."""
    from cloudpickle import cloudpickle as internals

    from causalab_ndif.shipping import measured, run_shipped

    plan, model = plain_model
    before = set(internals._PICKLE_BY_VALUE_MODULES)
    run_shipped(model, plan, None, {}, "local")
    assert set(internals._PICKLE_BY_VALUE_MODULES) == before
    with measured() as shipment:
        assert not any(name.startswith("causalab") for name in internals._PICKLE_BY_VALUE_MODULES)
    assert shipment.record()["travelled"] == "installed"
    assert set(internals._PICKLE_BY_VALUE_MODULES) == before


def test_a_plan_ships_only_the_featurizer_plugins_it_uses():
    from causalab_ndif.shipping import shipped_packages

    sweep = causalab_core.plan(ROOT / "documents/real/weekdays_layer_sweep.json")
    das = causalab_core.plan(ROOT / "documents/real/weekdays_das.json")
    assert shipped_packages(featurizer_classes(sweep, registry())) == ("causalab_core", "causalab_nnterp")
    assert shipped_packages(featurizer_classes(das, registry())) == (
        "causalab_core", "causalab_featurizers", "causalab_nnterp")


def test_server_requirements_for_the_shipped_mode_name_no_causalab():
    import subprocess
    import sys

    from causalab_core.plugins.provenance import watched_versions

    causalab = str(Path(sys.executable).parent / "causalab")
    done = subprocess.run([causalab, "ndif", "server-requirements", "--shipped",
                           str(ROOT / "documents/real/weekdays_das.json")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    versions = watched_versions()
    assert done.stdout.split() == [f"{name}=={versions[name].split('+')[0]}"
                                   for name in ("torch", "transformers", "nnsight", "pydantic")]


def test_no_module_a_block_ships_imports_causalab_inside_a_function_or_calls_super_bare():
    """Shipped code is rebuilt on a server with no causalab: an import run there would fail, and a function
    rebuilt from its source has no ``__class__`` cell, so a zero-argument ``super()`` fails there too."""
    import ast
    import importlib

    shipped = ["causalab_nnterp.block", "causalab_nnterp.sites", "causalab_core.errors", "causalab_core.ir.nodes",
               "causalab_core.plugins.contracts", "causalab_core.plugins.featurizing",
               *(f"causalab_featurizers.{name}" for name in ("das", "identity", "pca", "mask", "boundless", "sae")),
               *(f"causalab_core.runtime.{name}" for name in ("batches", "featurizers", "scores", "training", "windows"))]
    found = []
    for name in shipped:
        tree = ast.parse(Path(importlib.import_module(name).__file__).read_text())
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(function):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                found += [f"{name}.{function.name}: {m}" for m in modules if m.startswith("causalab")]
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "super" and not node.args:
                    found.append(f"{name}.{function.name}: super()")
    assert found == []


def test_every_chunk_of_a_run_ships_the_same_code():
    """run.json keeps the last job's record, so a resumed run (other chunks) must record the same."""
    import dataclasses

    from causalab_ndif.shipping import PlainModel, run_shipped

    plan = causalab_core.plan(ROOT / "documents/real/weekdays_layer_sweep.json")
    model = PlainModel(plan.model.source, key=plan.model.key, revision=plan.model.revision, dispatch=True,
                       dtype=torch.float32)
    records = [run_shipped(model, dataclasses.replace(plan, points=points), None, {}, "local")[2].record()
               for points in (plan.points[:1], plan.points[5:12])]
    assert records[0] == records[1] and records[0]["travelled"] == "by value"
