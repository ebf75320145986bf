"""``InterventionConformance``: what an intervention kind must do, from its recipe to ``apply``."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from safetensors.torch import save_file

from causalab_core.plugins.contracts import COMBINES, NEEDS, Intervention, Recipe

from causalab_testing.conformance.common import must_override, assert_params_forbid_unknown_keys
from causalab_testing.conformance.kit import Probe, model_width, kit_registry, plugin_module
from causalab_testing.conformance.reference import independent_forward



_FIELDS = ("needs", "combine", "alpha", "minus", "tensor", "seed", "std_of")


def _recipe_text(recipe) -> str:
    return ", ".join(f"{f}={getattr(recipe, f)!r}" for f in _FIELDS if hasattr(recipe, f))


class InterventionConformance:
    """An intervention kind has a name and parameters that refuse unknown keys; its recipe is a
    ``contracts.Recipe`` that follows from the parameters alone; a ``custom`` kind's ``apply`` keeps the site's
    shape, computes each row from its own values alone (and each position from its own, unless
    ``positionwise`` is False), and gives the same bytes for the same inputs whatever the global random state.
    End to end on the tiny Llama (``hooks``), a write of the kind changes the site's value at its window only,
    to what the kit's own per-row forward (:func:`independent_forward`) computes; rows that are not eligible are
    reported so (null values) and leave the eligible rows' values as they are without them.

    Override ``intervention`` (an instance, made as ``cls()``) and ``params`` (a list of parameter dicts, as a
    document writes them under ``intervention`` without ``kind``). The end-to-end runs give a kind what its
    recipe needs: a ``source`` read of the counterfactual prompt, a read for each name its recipe gives as
    ``minus`` or ``std_of``, and a vector file at its recipe's ``tensor`` path (relative to the document's
    folder), holding the ``vector`` fixture (default: a seeded random unit vector of the site's width).
    Needs the fixtures of :mod:`causalab_testing.fixtures`.
    """

    #: rows, window and width of the values ``apply`` is handed in the checks of ``apply`` alone.
    rows, window, width = 5, 3, 32
    #: False for a kind that mixes the positions of its window on purpose (one that writes the window's mean).
    positionwise = True
    #: the end-to-end write's layer (at ``block_output``); the site's value after it is read at the next block's input.
    layer = 1
    #: of the end-to-end rows, the last ones are made not eligible (a read resolved only where ``keep`` is yes).
    kept, excluded = 4, 2
    #: the engine the end-to-end runs use, and plugin objects registered beside the installed ones (an engine's).
    engine = "hooks"
    plugins: tuple = ()

    @pytest.fixture
    def intervention(self):
        must_override("intervention")

    @pytest.fixture
    def params(self):
        must_override("params")

    @pytest.fixture
    def vector(self):
        """The tensor a ``tensor`` need's file holds (one dimension, the site's width); None: a seeded random
        unit vector."""
        return None

    # helpers ------------------------------------------------------------------

    def validated(self, intervention, params) -> list:
        """``(dict, Params instance)`` for each entry of ``params``."""
        import pydantic

        assert isinstance(params, (list, tuple)) and params, (
            "the `params` fixture is a non-empty list of parameter dicts (one per setting to check)")
        out = []
        for p in params:
            try:
                out.append((p, type(intervention).Params.model_validate(p)))
            except pydantic.ValidationError as exc:
                pytest.fail(f"intervention {intervention.name!r}: the `params` fixture's {p!r} is not valid "
                            f"parameters: {exc.errors()[0]['msg']}", pytrace=False)
        return out

    def custom_settings(self, intervention, params) -> list:
        """``(dict, Params, recipe)`` for each entry whose recipe combines by the kind's own ``apply``."""
        found = [(p, valid, intervention.recipe(valid)) for p, valid in self.validated(intervention, params)]
        found = [f for f in found if f[2].combine == "custom"]
        if not found:
            pytest.skip(f"intervention {intervention.name!r} combines by core's math (no `custom` recipe): no apply")
        return found

    def unit_vector(self, vector, width: int) -> torch.Tensor:
        if vector is not None:
            return torch.as_tensor(vector).float().reshape(-1)
        drawn = torch.randn(width, generator=torch.Generator().manual_seed(17))
        return drawn / drawn.norm()

    def apply_inputs(self, recipe, vector, rows: int | None = None, window: int | None = None, seed: int = 0):
        """``x`` ``[rows, window, width]`` and the ``v`` an engine would hand the kind for its recipe's need:
        None for ``nothing``; one vector at every row and position for ``tensor`` (the ``vector`` fixture) and
        ``mean``; a value per row and position otherwise."""
        rows, window = rows or self.rows, window or self.window
        width = len(vector) if vector is not None else self.width
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, window, width, generator=gen)
        if recipe.needs == "nothing":
            return x, None
        if recipe.needs == "tensor":
            return x, self.unit_vector(vector, width).expand(rows, window, width).clone()
        if recipe.needs == "mean":
            return x, torch.randn(width, generator=gen).expand(rows, window, width).clone()
        return x, torch.randn(rows, window, width, generator=gen)

    @staticmethod
    def applied(intervention, x, v, valid):
        """``apply`` on copies of its inputs (a kind that changes them in place cannot spoil the next call)."""
        return intervention.apply(x.clone(), None if v is None else v.clone(), valid)

    @staticmethod
    def row_varies(recipe) -> bool:
        """Whether an engine hands the kind a ``v`` that differs between rows."""
        return recipe.needs in ("source", "resample", "noise")

    # the kind and its recipe ----------------------------------------------------------

    def test_has_a_name_and_a_params_model(self, intervention, params):
        import pydantic

        assert isinstance(intervention.name, str) and intervention.name, "an intervention kind has a non-empty name"
        Params = type(intervention).Params
        assert isinstance(Params, type) and issubclass(Params, pydantic.BaseModel), (
            f"intervention {intervention.name!r}: Params must be a pydantic model")
        self.validated(intervention, params)

    def test_is_constructed_without_arguments(self, intervention, params):
        """The compiler and every engine make a kind as ``cls()``."""
        fresh = type(intervention)()
        for _, valid in self.validated(intervention, params):
            assert fresh.recipe(valid) == intervention.recipe(valid)

    def test_params_forbid_unknown_keys(self, intervention, params):
        for p, valid in self.validated(intervention, params):
            assert_params_forbid_unknown_keys(f"intervention {intervention.name!r}", type(intervention).Params,
                                              valid.model_dump(mode="json"))

    def test_recipe_is_a_contract_recipe(self, intervention, params):
        """A ``contracts.Recipe`` with a need in ``NEEDS`` and a combination in ``COMBINES``; its fields plain
        data that mean something for that need; ``custom`` only with an ``apply`` of the kind's own."""
        who = f"intervention {intervention.name!r}"
        for p, valid in self.validated(intervention, params):
            recipe = intervention.recipe(valid)
            at = f"{who}, params {p!r}"
            if not isinstance(recipe, Recipe):
                pytest.fail(f"{at}: recipe returned {type(recipe).__name__}, not a contracts.Recipe", pytrace=False)
            problems = []
            if recipe.needs not in NEEDS:
                problems.append(f"needs {recipe.needs!r} is not one of {NEEDS}")
            if recipe.combine not in COMBINES:
                problems.append(f"combine {recipe.combine!r} is not one of {COMBINES}")
            if isinstance(recipe.alpha, bool) or not isinstance(recipe.alpha, (int, float)) \
                    or not math.isfinite(recipe.alpha):
                problems.append(f"alpha {recipe.alpha!r} is not a finite number")
            if (recipe.needs == "tensor") != isinstance(recipe.tensor, str):
                problems.append(f"tensor {recipe.tensor!r}: a file name exactly where the need is `tensor`")
            if recipe.minus is not None and (recipe.needs != "mean" or not isinstance(recipe.minus, str)):
                problems.append(f"minus {recipe.minus!r}: a read's name, only with the need `mean`")
            if recipe.std_of is not None and not isinstance(recipe.std_of, str):
                problems.append(f"std_of {recipe.std_of!r} is not a read's name")
            if recipe.seed is not None and (isinstance(recipe.seed, bool) or not isinstance(recipe.seed, int)
                                            or not 0 <= recipe.seed < 2**31):
                problems.append(f"seed {recipe.seed!r} is not an integer in [0, 2**31)")
            if recipe.combine == "custom" and type(intervention).apply is Intervention.apply:
                problems.append("combine `custom` needs an `apply` method of the kind's own")
            if problems:
                pytest.fail(f"{at}: recipe {_recipe_text(recipe)}: " + "; ".join(problems), pytrace=False)

    def test_recipe_follows_its_params_alone(self, intervention, params):
        """The same recipe twice, under two global random states (torch's and ``random``'s): the compiler
        lowers it once, on the client, and what it says must not depend on anything but the parameters."""
        for p, valid in self.validated(intervention, params):
            recipes = []
            for seed in (1, 2):
                with torch.random.fork_rng(devices=[]):
                    state = random.getstate()
                    try:
                        torch.manual_seed(seed)
                        random.seed(seed)
                        recipes.append(type(intervention)().recipe(type(intervention).Params.model_validate(p)))
                    finally:
                        random.setstate(state)
            if recipes[0] != recipes[1]:
                pytest.fail(f"intervention {intervention.name!r}, params {p!r}: two recipes for the same parameters "
                            f"under different global random states ({_recipe_text(recipes[0])} and "
                            f"{_recipe_text(recipes[1])}): draw anything random from a seed among the parameters",
                            pytrace=False)

    # a custom kind's apply --------------------------------------------------------------

    def test_a_custom_apply_keeps_its_contract(self, intervention, params, vector):
        """A kind with a ``custom`` recipe: ``apply`` keeps the site's shape, is row by row and position by
        position, and deterministic (the ``check_apply_*`` methods, each shown failing by the kit's tests). A kind
        that combines by core's math has no ``apply`` to check: skipped, once."""
        self.custom_settings(intervention, params)
        self.check_apply_keeps_the_site_shape(intervention, params, vector)
        self.check_apply_is_row_by_row(intervention, params, vector)
        if self.positionwise:
            self.check_apply_is_position_by_position(intervention, params, vector)
        self.check_apply_is_deterministic(intervention, params, vector)

    def check_apply_keeps_the_site_shape(self, intervention, params, vector):
        """A tensor of ``x``'s shape ``[rows, window, width]``, a batch as well as a single row of one position
        (an engine hands a kind a row at a time where windows differ in width)."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            for rows, window in ((self.rows, self.window), (1, 1), (1, self.window), (self.rows, 1)):
                x, v = self.apply_inputs(recipe, vector, rows, window)
                out = self.applied(intervention, x, v, valid)
                if not isinstance(out, torch.Tensor) or out.shape != x.shape or not out.is_floating_point():
                    got = f"{list(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
                    pytest.fail(f"intervention {intervention.name!r}, params {p!r}: apply returned {got} for x of "
                                f"shape {list(x.shape)}: it must return a float tensor of x's shape "
                                "[rows, window, width]", pytrace=False)

    def check_apply_is_row_by_row(self, intervention, params, vector):
        """A row's value is the same computed alone, in the batch, and in a batch whose other rows hold other
        values: no row (one that is not eligible, or any other) changes another's."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            x, v = self.apply_inputs(recipe, vector)
            whole = self.applied(intervention, x, v, valid)
            # other rows with other values (v too, where an engine hands each row its own)
            others_x = 10 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
            others_v = v if v is None or not self.row_varies(recipe) else \
                10 * torch.randn(v.shape, generator=torch.Generator().manual_seed(4))
            for row in range(len(x)):
                alone = self.applied(intervention, x[row:row + 1], None if v is None else v[row:row + 1], valid)
                mixed_x, mixed_v = others_x.clone(), None if v is None else others_v.clone()
                mixed_x[row] = x[row]
                if v is not None:
                    mixed_v[row] = v[row]
                among = self.applied(intervention, mixed_x, mixed_v, valid)[row:row + 1]
                for what, got in (("computed alone", alone), ("batched with rows holding other values", among)):
                    if got.shape != whole[row:row + 1].shape or not torch.allclose(got, whole[row:row + 1],
                                                                                     rtol=1e-5, atol=1e-6):
                        pytest.fail(f"intervention {intervention.name!r}, params {p!r}: row {row}'s value "
                                    f"{what} differs from its value in the batch: apply must compute each row from "
                                    "its own x and v alone (rows that are not eligible, or any other row, must not "
                                    "change it: no statistic over the batch's rows)", pytrace=False)

    def check_apply_is_position_by_position(self, intervention, params, vector):
        """Each position's value is the one ``apply`` gives that position alone: a kind writes at each position
        of its window what belongs there (set ``positionwise = False`` for a kind that mixes them on purpose)."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            x, v = self.apply_inputs(recipe, vector)
            whole = self.applied(intervention, x, v, valid)
            for at in range(x.shape[1]):
                alone = self.applied(intervention, x[:, at:at + 1], None if v is None else v[:, at:at + 1], valid)
                if alone.shape != whole[:, at:at + 1].shape or not torch.allclose(alone, whole[:, at:at + 1],
                                                                                  rtol=1e-5, atol=1e-6):
                    pytest.fail(f"intervention {intervention.name!r}, params {p!r}: position {at} of a "
                                f"{x.shape[1]}-position window gets another value than that position alone: it "
                                "writes there a value computed for another position (set positionwise = False "
                                "only for a kind that mixes its window's positions on purpose)", pytrace=False)

    def check_apply_is_deterministic(self, intervention, params, vector):
        """The same bytes for the same inputs: twice, from a fresh instance, and under two global random states."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            x, v = self.apply_inputs(recipe, vector)
            outs = [self.applied(intervention, x, v, valid), self.applied(type(intervention)(), x, v, valid)]
            for seed in (1, 2):
                with torch.random.fork_rng(devices=[]):
                    state = random.getstate()
                    try:
                        torch.manual_seed(seed)
                        random.seed(seed)
                        outs.append(self.applied(intervention, x, v, valid))
                    finally:
                        random.setstate(state)
            if not all(o.shape == outs[0].shape and torch.equal(o, outs[0]) for o in outs[1:]):
                pytest.fail(f"intervention {intervention.name!r}, params {p!r}: apply gave different values for the "
                            "same inputs (called again, on a fresh instance, or under another global random state): "
                            "every engine and run must write the same bytes; draw anything random from a seed among "
                            "the parameters, or use the need `noise`", pytrace=False)

    # end to end ------------------------------------------------------------------------

    def e2e_rows(self) -> list[dict]:
        """Weekday rows, ``kept`` with ``keep`` yes then ``excluded`` with no; ``mark`` (``cf_mark``): the day and
        its question mark, a window of two tokens."""
        from causalab_testing.data import weekday_rows

        rows = weekday_rows(self.kept + self.excluded, seed=5)
        for i, row in enumerate(rows):
            row["keep"] = "yes" if i < self.kept else "no"
            row["mark"], row["cf_mark"] = row["day"] + "?", row["cf_day"] + "?"
        return rows

    def e2e_document(self, model_key: str, intervention, p: dict, recipe) -> dict:
        """A write of the kind at block ``layer``'s output, at the day and question mark of the base prompt; a
        read ``kit_gate`` resolved only on the rows kept (the others: not eligible, ``row_excluded``); the reads
        the recipe takes, on the counterfactual prompt; ``logit_diff`` of the base run."""
        kept = {"keep": "yes"}
        at = {"layer": self.layer, "site": "block_output"}
        reads = {"kit_gate": {"input": "counterfactual", "layer": 0, "site": "block_output", "position": 0,
                              "where": kept}}
        write = {"input": "base", **at, "position": {"variable": "mark"},
                 "intervention": {"kind": intervention.name, **p}}
        if recipe.needs in ("source", "resample", "mean"):
            write["source"] = "kit_source"
            reads["kit_source"] = {"input": "counterfactual", **at, "position": {"variable": "mark"}}
            if recipe.needs != "source":  # a statistic or another row's value: taken over the kept rows only
                reads["kit_source"]["where"] = kept
        for name in (recipe.minus, recipe.std_of):
            if name is not None and name not in reads:
                reads[name] = {"input": "counterfactual", **at, "position": 3, "where": kept}
        return {
            "version": "2",
            "model": {"key": model_key, "dtype": "float32"},
            "data": {"path": "rows.jsonl"},
            "inputs": ["base", "counterfactual", "clean"],
            "columns": {"clean": "base"},
            "variables": {"counterfactual": {"mark": "cf_mark"}},
            "reads": reads,
            "writes": {"kit_write": write},
            "metrics": {"kit_score": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer",
                                      "input": "base"}},
        }

    def e2e_folder(self, folder, doc: dict, rows: list[dict], recipe, vector, width: int):
        """Writes the document, its rows and the recipe's vector file into ``folder``; the document's path."""
        from pathlib import Path

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if recipe.needs == "tensor" and not Path(recipe.tensor).is_absolute():
            (folder / recipe.tensor).parent.mkdir(parents=True, exist_ok=True)
            save_file({"vector": self.unit_vector(vector, width).contiguous()}, str(folder / recipe.tensor))
        path = folder / "doc.json"
        path.write_text(json.dumps(doc, indent=1))
        return path

    def registry_for(self, intervention):
        """The installed plugins with the kit's kinds, and the kind itself where it is not installed."""
        from causalab_core.plugins.registry import registry

        cls, installed = type(intervention), registry()
        if cls.name not in installed.names("intervention"):
            return kit_registry(plugin_module(f"conformance_{cls.name}", cls), *self.plugins)
        if installed.get("intervention", cls.name) is not cls:
            pytest.fail(f"intervention {cls.name!r}: the installed kind of that name is another class "
                        f"({installed.get('intervention', cls.name).__qualname__}); give the one checked its own name",
                        pytrace=False)
        return kit_registry(*self.plugins)

    def test_a_run_changes_the_site_only_at_the_written_window(self, intervention, params, vector, tiny_llama,
                                                               tmp_path):
        """The write's run and a clean run of the same prompt, each probed at block ``layer + 1``'s input (the
        site's value after the write) at every position: outside the window the two agree (a kind that writes
        at the wrong position changes them); inside it the value is the one the kit's per-row forward writes."""
        from causalab_core import api

        plugins = self.registry_for(intervention)
        width = model_width(tiny_llama)
        for i, (p, valid) in enumerate(self.validated(intervention, params)):
            recipe = intervention.recipe(valid)
            doc = self.e2e_document(str(tiny_llama), intervention, p, recipe)
            path = self.e2e_folder(tmp_path / f"window{i}", doc, self.e2e_rows(), recipe, vector, width)
            plan = api.plan(path, registry=plugins)
            length = min(len(ids) for ids in plan.prompts["base"])
            (write,) = [w for s in plan.steps() for w in s.writes if w.name == "kit_write"]
            for tag in ("base", "clean"):
                for at in range(length):
                    doc["writes"][f"kit_probe_{tag}_{at}"] = {
                        "input": tag, "layer": self.layer + 1, "site": "block_input", "position": at,
                        "intervention": {"kind": Probe.name, "tag": tag, "at": at}}
            path.write_text(json.dumps(doc, indent=1))
            Probe.seen.clear()
            result = api.run(path, registry=plugins, engine=self.engine)
            ran = {key: torch.cat(values) for key, values in Probe.seen.items()}
            Probe.seen.clear()
            independent_forward(result.plan, featurizers=api.featurizer_classes(result.plan, plugins))
            expected = {key: torch.cat(values) for key, values in Probe.seen.items()}
            Probe.seen.clear()
            for row, window in enumerate(write.windows):
                for at in range(length):
                    written, clean = ran[("base", at)][row, 0], ran[("clean", at)][row, 0]
                    if at not in window and not torch.allclose(written, clean, rtol=0, atol=1e-5):
                        pytest.fail(f"intervention {intervention.name!r}, params {p!r}: row {row}'s value at position "
                                    f"{at}, outside the written window {list(window)}, changed by "
                                    f"{(written - clean).abs().max().item():.3g}: a write changes its window only",
                                    pytrace=False)
                    if at in window and not torch.allclose(written, expected[("base", at)][row, 0], rtol=0,
                                                           atol=1e-5):
                        pytest.fail(f"intervention {intervention.name!r}, params {p!r}: row {row}'s value written at "
                                    f"position {at} differs from the kit's per-row forward by "
                                    f"{(written - expected[('base', at)][row, 0]).abs().max().item():.3g} "
                                    f"(recipe {_recipe_text(recipe)})", pytrace=False)

    def test_rows_not_eligible_are_left_out_and_move_no_other_row(self, intervention, params, vector, tiny_llama,
                                                                 tmp_path):
        """The rows a read does not resolve on are not eligible (values null, reason ``row_excluded``); the
        eligible rows' values are the same with those rows dropped from the data (they come last, so no row's
        index, which noise and a resample draw from, moves)."""
        from causalab_core import api

        plugins = self.registry_for(intervention)
        width = model_width(tiny_llama)
        rows = self.e2e_rows()
        for i, (p, valid) in enumerate(self.validated(intervention, params)):
            recipe = intervention.recipe(valid)
            doc = self.e2e_document(str(tiny_llama), intervention, p, recipe)
            scored = []
            for name, data in (("all", rows), ("kept", rows[:self.kept])):
                path = self.e2e_folder(tmp_path / f"rows{i}_{name}", doc, data, recipe, vector, width)
                (metric,) = api.run(path, registry=plugins, engine=self.engine).metrics
                scored.append(metric.content)
            every, kept = scored
            who = f"intervention {intervention.name!r}, params {p!r}"
            for row, value in enumerate(every["values"]):
                if row >= self.kept and (value is not None or every["reasons"][row] != "row_excluded"):
                    pytest.fail(f"{who}: row {row}, on which a read does not resolve, has value {value!r} and reason "
                                f"{every['reasons'][row]!r}, not null and 'row_excluded'", pytrace=False)
                if row < self.kept and not isinstance(value, float):
                    pytest.fail(f"{who}: eligible row {row} has value {value!r} (reason {every['reasons'][row]!r}), "
                                "not a number", pytrace=False)
            moved = [row for row in range(self.kept)
                     if not isinstance(kept["values"][row], float)
                     or abs(kept["values"][row] - every["values"][row]) > 1e-5]
            if moved:
                pytest.fail(f"{who}: eligible rows {moved} changed when the {self.excluded} rows that are not "
                            f"eligible were dropped from the data ({[every['values'][r] for r in moved]} with them, "
                            f"{[kept['values'][r] for r in moved]} without): a row's value must come from its own "
                            "values (a statistic over rows only from the rows the read resolved on)", pytrace=False)
