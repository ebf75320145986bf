"""Every claim and table cell of documents/real/README.md's section on weekdays_ablation.json and
weekdays_ablation_all.json, against one fresh run of each.

Untrained forwards, the same on every machine up to float32 rounding: the tables are checked to their two
decimals. Three cells are reproduced outside causalab's runtime, with a plain transformers forward of the
shipped checkpoint and forward hooks written here. Passes under OMP_NUM_THREADS=1 and 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from causalab_core import api
from tests.readme_sections import Section

ROOT = Path(__file__).parent.parent
REAL = ROOT / "documents" / "real"
README = (REAL / "README.md").read_text()
HEADING = "weekdays_ablation.json and weekdays_ablation_all.json"
TWO_DECIMALS = 0.005 + 1e-9
LAYERS, POSITIONS = tuple(range(8)), (-7, -4, -1)
ABLATIONS = ("attn_zero", "attn_mean", "mlp_zero", "mlp_mean")  # the copies of the base prompt, one per ablation
SITES = {"attn": "attn_output", "mlp": "mlp_output", "resid": "block_input"}
CANDIDATES = ["base_answer", "label_count", "label_day", "label_answer"]


STUDY = Section(README, HEADING)
section, says, tables = STUDY.text, STUDY.says, STUDY.tables


def recorded() -> dict[tuple[str, int, int | str], tuple[float, float]]:
    """(copy, layer, position or "all") -> the README's (IIA, p), from every table of the section."""
    cells = {}
    for header, *rows in tables():
        assert header[0] == "layer"
        columns = []
        for name in header[1:]:
            site, kind, position = name.replace("`", "").split()
            columns.append((f"{site}_{kind}", "all" if position == "all" else int(position)))
        for row in rows:
            for (copy, position), cell in zip(columns, row[1:]):
                iia, p = (float(x) for x in cell.split(" / "))
                assert (copy, int(row[0]), position) not in cells, "a cell shown twice"
                cells[(copy, int(row[0]), position)] = (iia, p)
    return cells


def summary(folder: Path, metric: str) -> float:
    return json.loads((folder / f"{metric}.json").read_text())["summary"]["mean"]


def row_values(folder: Path, metric: str) -> list:
    return json.loads((folder / f"{metric}.json").read_text())["values"]


@pytest.fixture(scope="module")
def runs(studies):
    """One fresh run of each document, the one documents/real/README.md's commands made this session:
    {name: (out folder, what ran: ``plan``, ``run``)}."""
    return {name: (studies[f"{name}.json"].out, studies[f"{name}.json"])
            for name in ("weekdays_ablation", "weekdays_ablation_all")}


@pytest.fixture(scope="module")
def fresh(runs) -> dict[tuple[str, int, int | str], tuple[float, float]]:
    """(copy, layer, position or "all") -> (IIA, p) of the fresh runs; the copy ``clean`` is ``base``, unwritten."""
    table = {}
    for name, (out, result) in runs.items():
        copies = ABLATIONS + (("resid_zero",) if name == "weekdays_ablation" else ())
        for point in result.plan.points:
            values = dict(point.values)
            position = values.get("pos", "all")
            for copy in (*copies, "clean"):
                table[(copy, values["layer"], position)] = (
                    summary(out / point.name, f"iia_{copy}"), summary(out / point.name, f"p_{copy}"))
    return table


def test_the_documents_are_the_study_the_readme_describes(runs):
    sweep = json.loads((REAL / "weekdays_layer_sweep.json").read_text())
    main = json.loads((REAL / "weekdays_ablation.json").read_text())
    whole = json.loads((REAL / "weekdays_ablation_all.json").read_text())
    for doc in (main, whole):
        # The layer sweep's model and rows.
        assert doc["model"] == sweep["model"] and doc["data"] == sweep["data"]
        copies = [i for i in doc["inputs"] if i not in ("base", "counterfactual")]
        assert doc["columns"] == {c: "base" for c in copies}
        for name, write in doc["writes"].items():
            site, kind = write["input"].split("_")
            assert write["site"] == SITES[site] and write["intervention"] == {"kind": kind}
            # Mean: the counterfactual prompts' mean at the same site, layer and position.
            if kind == "mean":
                read = doc["reads"][write["source"]]
                assert read["input"] == "counterfactual"
                assert all(read[k] == write[k] for k in ("site", "layer", "position")), name
            else:
                assert "source" not in write
        for copy in copies:
            assert doc["metrics"][f"iia_{copy}"] == {"kind": "iia", "input": copy, "choices": CANDIDATES,
                                                     "label": "base_answer"}
            assert doc["metrics"][f"p_{copy}"] == {"kind": "p_answer", "input": copy, "answer": "base_answer"}
        assert doc["metrics"]["p_clean"]["input"] == "base" and not any(w["input"] == "base" for w in doc["writes"].values())
    assert main["sweep"] == {"layer": list(LAYERS), "pos": list(POSITIONS)}
    assert whole["sweep"] == {"layer": list(LAYERS)}
    # The whole component: every one of the 13 tokens (BOS included) of every prompt, once per ablation.
    _, result = runs["weekdays_ablation_all"]
    assert {len(ids) for ids in result.plan.prompts["base"]} == {13} and says("all 13 tokens at once, BOS included")
    for copy in ABLATIONS:
        assert sorted(w["position"] for w in whole["writes"].values() if w["input"] == copy) == list(range(13))
    out, _ = runs["weekdays_ablation"]
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 60 and says("60 held-out rows")


def test_every_table_cell_is_what_a_fresh_run_gives(fresh):
    cells = recorded()
    # Every ablation of both runs is in a table, and nothing else is.
    assert cells.keys() == {key for key in fresh if key[0] != "clean"}
    for key, (iia, p) in cells.items():
        got = fresh[key]
        assert abs(got[0] - iia) <= TWO_DECIMALS and abs(got[1] - p) <= TWO_DECIMALS, (key, (iia, p), got)


def test_the_clean_run_answers_every_row(fresh):
    clean = {v for k, v in fresh.items() if k[0] == "clean"}
    assert len({round(p, 6) for _, p in clean}) == 1, "the unwritten base run differs between points"
    (iia, p), *_ = clean
    assert iia == 1 and round(p, 2) == 0.99 and says("is scored as the clean run: 1.00 / 0.99 at every point")


def test_the_controls(fresh):
    clean = fresh[("clean", 0, -1)][1]
    # Must break: the stream entering any block, zeroed at the last token.
    broken = [fresh[("resid_zero", layer, -1)] for layer in LAYERS]
    assert all(0.1 <= iia <= 0.3 and p <= 0.14 + TWO_DECIMALS for iia, p in broken), broken
    assert says(f"leaves {min(i for i, _ in broken):.2f}-{max(i for i, _ in broken):.2f} of the answers")
    assert broken[7][1] < 0.005
    # Must not break: attention or MLP at the count's token, any block, either way; the stream at the
    # count's and the day's token from block 5 on (the layer sweep finds nothing there).
    quiet = [fresh[(copy, layer, -7)] for copy in ABLATIONS for layer in LAYERS]
    quiet += [fresh[("resid_zero", layer, pos)] for layer in (5, 6, 7) for pos in (-7, -4)]
    assert all(iia == 1 and abs(p - clean) <= 0.001 for iia, p in quiet), quiet
    # ... and could have: the count's embedding, zeroed, breaks the task.
    assert fresh[("resid_zero", 0, -7)][0] <= 0.1 and says("zeroing its embedding (the stream entering block 0) leaves 0.08")


def test_attention_in_blocks_0_and_1_at_the_last_token_is_needed(fresh):
    for kind in ("zero", "mean"):
        at_last = [fresh[(f"attn_{kind}", layer, -1)][0] for layer in LAYERS]
        assert max(at_last[:2]) < 0.5 and 0.75 <= at_last[2] < 0.9, at_last
        assert min(at_last[3:]) >= 0.98 - TWO_DECIMALS, at_last
    assert says("zeroed it leaves 0.15 and 0.33, mean-ablated 0.35 and 0.42")


def test_the_day_token_needs_block_0_attention_only(fresh):
    clean = fresh[("clean", 0, -1)][1]
    assert fresh[("attn_zero", 0, -4)][0] < 0.5 and fresh[("attn_mean", 0, -4)][0] < 0.5
    assert fresh[("attn_zero", 1, -4)][0] >= 0.95 and fresh[("attn_mean", 1, -4)][0] == 1
    later = [fresh[(copy, layer, -4)] for copy in ABLATIONS for layer in LAYERS[2:]]
    assert all(iia == 1 and abs(p - clean) <= 0.001 for iia, p in later), later
    # Though the stream at the day's token still matters entering blocks 2 and 3.
    assert fresh[("resid_zero", 2, -4)][0] < 0.7 and fresh[("resid_zero", 3, -4)][0] < 0.9


def test_no_single_mlp_is_needed(fresh):
    mlp = {key: v for key, v in fresh.items() if key[0].startswith("mlp_")}
    lowest = min(mlp, key=lambda key: mlp[key][0])
    # The largest drop is block 1's MLP, and it keeps more than half of the answers.
    assert lowest[1] == 1 and 0.5 < mlp[lowest][0] < 0.65, (lowest, mlp[lowest])
    assert all(iia >= 0.8 for key, (iia, _) in mlp.items() if key[1] != 1)
    # Blocks 2-4, where the layer sweep has the answer built, leave 0.95 or more either way at the last token.
    assert all(mlp[(f"mlp_{kind}", layer, -1)][0] >= 0.95 - TWO_DECIMALS for kind in ("zero", "mean") for layer in (2, 3, 4))
    assert all(mlp[(f"mlp_{kind}", layer, -1)][0] == 1 and mlp[(f"mlp_{kind}", layer, -1)][1] >= 0.985
               for kind in ("zero", "mean") for layer in (2, 3, 5))
    late = [mlp[(f"mlp_{kind}", layer, -1)] for kind in ("zero", "mean") for layer in (4, 6, 7)]
    assert 0.785 <= min(p for _, p in late) and max(p for _, p in late) < 0.945 and min(i for i, _ in late) >= 0.83 - TWO_DECIMALS
    assert says("the largest drop is block 1's MLP (0.63 zeroed and 0.80 mean-ablated at the last token; 0.63 and 0.58 at every position)")


def test_zero_and_mean_pick_the_same_components(fresh):
    def needed(kind):
        return {(site, layer, pos) for (copy, layer, pos), (iia, _) in fresh.items()
                for site in ("attn", "mlp") if copy == f"{site}_{kind}" and pos != "all" and iia < 0.9}
    assert needed("zero") == needed("mean") == {("attn", 0, -1), ("attn", 1, -1), ("attn", 2, -1),
                                               ("mlp", 1, -1), ("mlp", 6, -1), ("attn", 0, -4)}
    # They differ in how much.
    assert fresh[("attn_zero", 0, -1)][0] < fresh[("attn_mean", 0, -1)][0] - 0.1
    assert fresh[("attn_mean", 0, -4)][0] < fresh[("attn_zero", 0, -4)][0] - 0.1


def test_the_whole_component_against_the_last_token(fresh):
    diffs = [abs(a - b) for copy in ABLATIONS for layer in LAYERS[2:]
             for a, b in zip(fresh[(copy, layer, "all")], fresh[(copy, layer, -1)])]
    assert max(diffs) <= 0.03 + TWO_DECIMALS and max(diffs) >= 0.02
    assert fresh[("attn_zero", 0, "all")][0] > fresh[("attn_zero", 0, -1)][0] + 0.1
    assert fresh[("mlp_mean", 1, "all")][0] < fresh[("mlp_mean", 1, -1)][0] - 0.1
    assert fresh[("mlp_zero", 0, "all")][0] < fresh[("mlp_zero", 0, -1)][0] - 0.05


# -- outside causalab: a plain transformers forward of the shipped checkpoint, with hooks written here ------

def plain_forward(model, ids, edit=None):
    """Last-token probabilities; ``edit = (module, function)`` rewrites that module's output first."""
    import torch

    handle = None
    if edit is not None:
        module, change = edit

        def hook(mod, args, output):
            hidden = (output[0] if isinstance(output, tuple) else output).clone()
            change(hidden)
            return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
        handle = module.register_forward_hook(hook)
    try:
        with torch.no_grad():
            return model(input_ids=ids).logits[:, -1].float().softmax(-1)
    finally:
        if handle is not None:
            handle.remove()


def test_three_cells_reproduced_outside_causalab(runs):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from causalab_toy.models import CHECKPOINTS

    folder = CHECKPOINTS / "weekdays"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    out, _ = runs["weekdays_ablation"]
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    ids = torch.tensor([tokenizer(r["base"]).input_ids for r in rows])  # every prompt is 13 tokens: no padding
    cf_ids = torch.tensor([tokenizer(r["counterfactual"]).input_ids for r in rows])
    answers = torch.tensor([[tokenizer(r[c], add_special_tokens=False).input_ids[0] for c in CANDIDATES] for r in rows])
    layers = model.model.layers
    # Positions 0-5 (BOS, `Q: what day is`) are the same tokens in every prompt, base and counterfactual: a
    # mean ablation there writes what is there, as the README says.
    assert (torch.cat([ids, cf_ids])[:, :6] == ids[0, :6]).all() and (ids[:, 6] != ids[0, 6]).any()

    def scored(probs):
        p = probs.gather(1, answers[:, :1])[:, 0]
        kept = (probs.gather(1, answers).argmax(1) == 0).float()
        return p, kept

    def zero_last(hidden):
        hidden[:, -1] = 0

    def zero_all(hidden):
        hidden[:] = 0

    captured = []
    plain_forward(model, cf_ids, (layers[0].self_attn, lambda h: captured.append(h[:, -1].clone())))
    mean = captured[0].mean(0)

    def mean_last(hidden):
        hidden[:, -1] = mean

    clean = scored(plain_forward(model, ids))
    cells = {  # (copy, layer, position): (the run's point folder, the plain forward's p and kept answers)
        ("mlp_zero", 1, -1): (out / "layer=1,pos=-1", scored(plain_forward(model, ids, (layers[1].mlp, zero_last)))),
        ("attn_mean", 0, -1): (out / "layer=0,pos=-1", scored(plain_forward(model, ids, (layers[0].self_attn, mean_last)))),
        ("attn_zero", 0, "all"): (runs["weekdays_ablation_all"][0] / "layer=0",
                                  scored(plain_forward(model, ids, (layers[0].self_attn, zero_all)))),
    }
    table = recorded()
    assert clean[1].mean() == 1 and round(clean[0].mean().item(), 2) == 0.99
    assert row_values(out / "layer=0,pos=-1", "p_clean") == pytest.approx(clean[0].tolist(), abs=1e-5)
    for (copy, layer, position), (point, (p, kept)) in cells.items():
        # Row by row, the run's numbers are the plain forward's; the README's cell is their mean.
        assert row_values(point, f"p_{copy}") == pytest.approx(p.tolist(), abs=1e-5), copy
        assert row_values(point, f"iia_{copy}") == kept.tolist(), copy
        iia_cell, p_cell = table[(copy, layer, position)]
        assert abs(kept.mean().item() - iia_cell) <= TWO_DECIMALS and abs(p.mean().item() - p_cell) <= TWO_DECIMALS
        assert p.mean() < clean[0].mean() - 0.3  # each of the three breaks the task: a cell that can fail


@pytest.mark.parametrize("threads", [1, 2])
def test_early_attention_is_needed_with_one_and_two_threads(tmp_path, threads):
    """The finding, not the decimals, whatever the thread count (the fixture above uses this process's)."""
    import torch

    document = json.loads((REAL / "weekdays_ablation.json").read_text())
    document["sweep"] = {"layer": [0, 1, 5], "pos": [-1]}
    path = tmp_path / "ablation.json"
    path.write_text(json.dumps(document))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = api.run(path, out=tmp_path / "o")
    finally:
        torch.set_num_threads(previous)
    assert result.run["arithmetic"]["torch_threads"] == threads
    iia = {(copy, layer): summary(tmp_path / "o" / f"layer={layer},pos=-1", f"iia_{copy}")
           for copy in ("attn_zero", "attn_mean", "resid_zero", "clean") for layer in (0, 1, 5)}
    assert all(iia[(c, layer)] < 0.5 for c in ("attn_zero", "attn_mean") for layer in (0, 1)), iia
    assert iia[("attn_zero", 5)] == iia[("attn_mean", 5)] == iia[("clean", 5)] == 1, iia
    assert iia[("resid_zero", 5)] < 0.3, iia
