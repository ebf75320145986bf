"""Every table cell and claim of documents/real/README.md's two tracing sections, against one fresh run of each
document: causal tracing (entity_tracing_{block_output,attn_output,mlp_output,controls}.json), and denoising
against noising under its Gaussian noise (entity_noising_*.json) and on a minimal pair
(entity_{denoising,noising}_pair_*.json).

Untrained forwards, the same on every machine up to float32 rounding: the tables are checked to their two
decimals. A few cells are rebuilt outside causalab's runtime, with a plain transformers forward of the shipped
checkpoint and hooks written here (the noise drawn as documented, sigma from the subject's embeddings), row by
row within 1e-5; the same reference redraws the noise to measure what one draw is worth. Passes under
OMP_NUM_THREADS=1 and 2, and runs one finding with 1 and with 2 threads in one process.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from causalab_core import api
from tests.readme_sections import Section

ROOT = Path(__file__).parent.parent
REAL = ROOT / "documents" / "real"
README = (REAL / "README.md").read_text()
TRACING = "entity_tracing_{block_output,attn_output,mlp_output,controls}.json"
PATCHING = ("entity_noising_{block_output,attn_output,mlp_output}.json and "
            "entity_{denoising,noising}_pair_{block_output,attn_output,mlp_output}.json")
TWO_DECIMALS = 0.005 + 1e-9
SITES = ("block_output", "attn_output", "mlp_output")
SITE_WORD = {"residual": "block_output", "attention": "attn_output", "MLP": "mlp_output"}
SUBJECTS = ("name", "place")
LAYERS = (0, 1, 2, 3)
NAME = {"variable": "entity"}
ORDINAL, LAST = 16, 19  # token indices in every row's prompt (20 tokens, BOS at 0)
GRID = [*range(20), NAME]  # the tracing and noising grid's positions
OTHERS = [p for p in GRID if p not in (ORDINAL, LAST)]
PAIR = [0, NAME, 15, -4, -3, -2, -1]
PAIR_OTHERS = [0, NAME, 15, -3, -2]
ENTITY_SWEEP = json.loads((REAL / "entity_layer_sweep.json").read_text())


def key(position) -> str:
    return json.dumps(position, sort_keys=True)


def section(heading: str) -> str:
    return Section(README, heading).text()


def says(heading: str, text: str) -> bool:
    return Section(README, heading).says(text)


def tables(heading: str) -> list[list[list[str]]]:
    return Section(README, heading).tables()


def numbers(cell: str) -> tuple[float, ...]:
    return tuple(float(x) for x in cell.split(" / "))


def near(fresh: float, recorded: float) -> bool:
    return abs(fresh - recorded) <= TWO_DECIMALS


# -- one fresh run of each document ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``get(name)`` -> (out folder, result): each document run at most once in this module."""
    found = {}

    def get(name: str):
        if name not in found:
            out = tmp_path_factory.mktemp(name) / "o"
            found[name] = (out, api.run(REAL / f"{name}.json", out=out))
        return found[name]
    return get


def metric(runs, name: str, metric_name: str, field: str = "mean") -> dict:
    """(layer, position key) -> the metric's summary mean (or, with field "values", its per-row values)."""
    out, result = runs(name)
    table = {}
    for point in result.plan.points:
        v = dict(point.values)
        data = json.loads((out / point.name / f"{metric_name}.json").read_text())
        table[(v["layer"], key(v["pos"]))] = data["summary"]["mean"] if field == "mean" else data["values"]
    return table


@pytest.fixture(scope="module")
def controls(runs):
    out, _ = runs("entity_tracing_controls")
    return {m: json.loads((out / f"{m}.json").read_text())["summary"]["mean"] for m in ("p_clean", "p_name", "p_place")}


@pytest.fixture(scope="module")
def traced(runs):
    """subject -> site -> (layer, position key) -> p, restoring one clean site into the noised run (denoising)."""
    return {s: {site: metric(runs, f"entity_tracing_{site}", f"p_{s}") for site in SITES} for s in SUBJECTS}


@pytest.fixture(scope="module")
def noised(runs):
    """subject -> site -> (layer, position key) -> p, one noised site written into a clean run (noising)."""
    return {s: {site: metric(runs, f"entity_noising_{site}", f"p_{s}") for site in SITES} for s in SUBJECTS}


@pytest.fixture(scope="module")
def pair(runs):
    """direction -> site -> metric -> (layer, position key) -> value, for the minimal pair."""
    return {d: {site: {m: metric(runs, f"entity_{d}_pair_{site}", m) for m in ("p", "nld", "p_donor")}
                for site in SITES} for d in ("denoising", "noising")}


def restored_share(p: float, corrupted: float, clean: float) -> float:
    return (p - corrupted) / (clean - corrupted)


# -- the documents ---------------------------------------------------------------------------------------------


def test_the_documents_are_the_ones_the_readme_describes():
    noise = {"kind": "noise", "scale": 3, "seed": 0}
    for site in SITES:
        for name in (f"entity_tracing_{site}", f"entity_noising_{site}"):
            doc = json.loads((REAL / f"{name}.json").read_text())
            # The layer sweep's rows (same spec), the base prompt run again for each corruption.
            assert doc["data"] == ENTITY_SWEEP["data"] and doc["model"] == ENTITY_SWEEP["model"]
            assert doc["columns"]["noised_name"] == doc["columns"]["noised_place"] == "base"
            assert doc["writes"]["corrupt_name"]["intervention"] == {**noise, "std_of": "name_emb"}
            assert doc["writes"]["corrupt_place"]["intervention"] == {**noise, "std_of": "place_emb"}
            for subject, position in (("name", NAME), ("place", {"variable": "place"})):
                read, write = doc["reads"][f"{subject}_emb"], doc["writes"][f"corrupt_{subject}"]
                assert read["input"] == "base" and read["position"] == write["position"] == position
                assert read["layer"] == write["layer"] == 0 and read["site"] == write["site"] == "block_input"
            assert doc["sweep"] == {"layer": list(LAYERS), "pos": GRID}
            assert {w["site"] for w in doc["writes"].values()} == {"block_input", site}
        for direction in ("denoising", "noising"):
            doc = json.loads((REAL / f"entity_{direction}_pair_{site}.json").read_text())
            assert doc["direction"] == {"patch": direction, "clean": "base", "corrupted": "counterfactual"}
            assert doc["data"]["causal_model"]["intervene"] == ["place"]
            assert doc["reads"]["act"]["input"] == "donor" and doc["writes"]["patch"]["input"] == "recipient"
            assert doc["reads"]["act"]["site"] == doc["writes"]["patch"]["site"] == site
            assert doc["sweep"] == {"layer": list(LAYERS), "pos": PAIR}
    controls_doc = json.loads((REAL / "entity_tracing_controls.json").read_text())
    assert controls_doc["data"] == ENTITY_SWEEP["data"] and "sweep" not in controls_doc
    assert says(TRACING, "84 points per site") and says(PATCHING, "28 points per document")


def test_the_pair_differs_in_the_ordinal_alone_and_the_corrupted_prompt_answers_otherwise(runs):
    out, _ = runs("entity_denoising_pair_block_output")
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    model, tokenizer = plain()
    assert len(rows) == 60
    for row in rows:
        base, cf = (tokenizer(row[c])["input_ids"] for c in ("base", "counterfactual"))
        assert len(base) == len(cf) == 20 and [i for i in range(20) if base[i] != cf[i]] == [ORDINAL]
    # The corrupted prompt gives its own answer: p 0.999 or more on every row.
    ids = torch.tensor([tokenizer(r["counterfactual"])["input_ids"] for r in rows])
    cf_answer = torch.tensor([token(tokenizer, r["cf_answer"]) for r in rows])
    with torch.no_grad():
        p = model(input_ids=ids).logits[:, -1].softmax(-1).gather(1, cf_answer[:, None])[:, 0]
    assert p.min() >= 0.999 and says(PATCHING, "the corrupted one gives its own answer (p 0.999 or more on every row)")


# -- every table cell ------------------------------------------------------------------------------------------


def positions_of(label: str, others: list) -> list:
    """The positions a table row's label names."""
    if "every other position" in label or label.startswith("any site, `0`"):
        return others
    token = label.split("`")[1]
    return [int(token)]


def test_the_tracing_tables_are_what_fresh_runs_give(traced):
    name_table, place_table = tables(TRACING)
    for subject, table in (("name", name_table), ("place", place_table)):
        header, *rows = table
        assert header == ["position", "layer 0", "layer 1", "layer 2", "layer 3"]
        assert [r[0].split("`")[1] for r in rows] == ["16", "19", "0"]
        assert rows[2][0] == "every other position: `0`-`15`, `17`, `18`, the asked name"
        for label, *cells in rows:
            for layer, cell in zip(LAYERS, cells):
                recorded = numbers(cell)
                for position in positions_of(label, OTHERS):
                    fresh = tuple(traced[subject][site][(layer, key(position))] for site in SITES)
                    assert all(near(f, r) for f, r in zip(fresh, recorded)), (subject, label, layer, position, fresh)


def check_side_by_side(table, denoised, noised_, others):
    header, *rows = table
    assert header == ["site, position", "layer 0", "layer 1", "layer 2", "layer 3"]
    for label, *cells in rows:
        sites = SITES if label.startswith("any site") else (SITE_WORD[label.split(",")[0]],)
        for layer, cell in zip(LAYERS, cells):
            recorded = numbers(cell)
            for site in sites:
                for position in positions_of(label, others):
                    fresh = (denoised[site][(layer, key(position))], noised_[site][(layer, key(position))])
                    assert all(near(f, r) for f, r in zip(fresh, recorded)), (label, layer, site, position, fresh)
    return [label for label, *_ in rows]


def test_the_side_by_side_tables_are_what_fresh_runs_give(traced, noised, pair):
    name_table, place_table, pair_p, pair_nld = tables(PATCHING)
    expected = [f"{word}, `{p}`" for p in (16, 19) for word in SITE_WORD] + ["any site, every other position"]
    for subject, table in (("name", name_table), ("place", place_table)):
        assert check_side_by_side(table, traced[subject], noised[subject], OTHERS) == expected
    expected = [f"{word}, `{p}`" for p in (-4, -1) for word in SITE_WORD] + [
        "any site, `0`, the asked name, `15`, `-3`, `-2`"]
    for metric_name, table in (("p", pair_p), ("nld", pair_nld)):
        den = {site: pair["denoising"][site][metric_name] for site in SITES}
        noi = {site: pair["noising"][site][metric_name] for site in SITES}
        assert check_side_by_side(table, den, noi, PAIR_OTHERS) == expected


# -- the tracing section's claims ------------------------------------------------------------------------------


def test_the_tracing_controls(controls, traced):
    clean, corrupted = controls["p_clean"], {"name": controls["p_name"], "place": controls["p_place"]}
    assert abs(clean - 0.9995) < 5e-5 and near(corrupted["name"], 0.09) and near(corrupted["place"], 0.26)
    assert says(TRACING, "**clean 1.00** (0.9995), **the asked name corrupted 0.09**, **the ordinal corrupted 0.26**")
    for subject in SUBJECTS:
        for site in SITES:
            t = traced[subject][site]
            # BOS is before every corrupted token: restoring it cannot matter.
            assert all(abs(t[(layer, key(0))] - corrupted[subject]) <= 1e-6 for layer in LAYERS), (subject, site)
            # Every position but the ordinal and the last token stays at the corrupted level (two decimals).
            assert all(near(t[(layer, key(p))], corrupted[subject]) for layer in LAYERS for p in OTHERS)
        # The last token's residual leaving block 3 is all the LM head reads: the clean level.
        assert abs(traced[subject]["block_output"][(3, key(LAST))] - clean) <= 1e-5


def test_the_tracing_findings(controls, traced):
    clean = controls["p_clean"]
    corrupted = {"name": controls["p_name"], "place": controls["p_place"]}
    t = {s: {site: {(layer, pos): v for (layer, pos), v in traced[s][site].items()} for site in SITES}
         for s in SUBJECTS}

    def p(subject, site, layer, position):
        return t[subject][site][(layer, key(position))]

    def share(subject, site, layer, position):
        return restored_share(p(subject, site, layer, position), corrupted[subject], clean)

    for s in SUBJECTS:
        # Two tokens carry the answer back, one hop each.
        assert p(s, "block_output", 0, ORDINAL) >= 0.995
        assert all(p(s, "block_output", layer, LAST) >= 0.995 for layer in (1, 2, 3))
        # No site at the subject's own token: the asked name, any site, any layer (within 0.005).
        assert all(abs(p(s, site, layer, NAME) - corrupted[s]) <= 0.005 for site in SITES for layer in LAYERS)
        # The late site: block 1's attention at the last token; block 3's brings back next to nothing.
        assert p(s, "attn_output", 1, LAST) >= 0.995
        assert abs(p(s, "attn_output", 3, LAST) - corrupted[s]) <= 0.01
        # Block 2's attention at the last token brings back what the ordinal's residual leaving block 1 does.
        assert abs(p(s, "attn_output", 2, LAST) - p(s, "block_output", 1, ORDINAL)) <= 0.01
        # The early site is attention: block 0's MLP at the ordinal brings back far less than its attention.
        assert p(s, "mlp_output", 0, ORDINAL) < p(s, "attn_output", 0, ORDINAL) - 0.5
        # The last token's MLPs bring back part, never all.
        assert all(corrupted[s] + 0.05 < p(s, "mlp_output", layer, LAST) < 0.9 for layer in (1, 2, 3))
    assert p("name", "attn_output", 0, ORDINAL) >= 0.995 and near(p("place", "attn_output", 0, ORDINAL), 0.92)
    assert near(share("name", "mlp_output", 0, ORDINAL), 0.09) and near(share("place", "mlp_output", 0, ORDINAL), 0.14)
    assert near(share("name", "mlp_output", 1, LAST), 0.48) and near(share("place", "mlp_output", 1, LAST), 0.81)
    assert says(TRACING, "block 0's MLP there 0.18 and 0.36 (restored shares 0.09 and 0.14)")
    assert says(TRACING, "block 1's 0.53 and 0.86 (restored shares 0.48 and 0.81)")
    # The ordinal is the weaker corruption, and every partial restoration is larger for it (p and share).
    assert corrupted["place"] > corrupted["name"]
    for cell in PARTIAL["name"]:
        assert p("place", *cell) > p("name", *cell) and share("place", *cell) > share("name", *cell), cell


# -- the side-by-side section's claims -------------------------------------------------------------------------


def test_the_patching_controls(controls, noised, pair):
    corrupted = {"name": controls["p_name"], "place": controls["p_place"]}
    for s in SUBJECTS:
        for site in SITES:
            # Noising BOS writes the clean run's own value.
            assert all(abs(noised[s][site][(layer, key(0))] - controls["p_clean"]) <= 1e-6 for layer in LAYERS)
        # Noising the last token's residual leaving block 3 gives the corrupted level.
        assert abs(noised[s]["block_output"][(3, key(LAST))] - corrupted[s]) <= 1e-5
    # The pair: the donors' levels, and tokens the two runs share leave each recipient at its own level.
    levels = {d: {v for site in SITES for v in pair[d][site]["p_donor"].values()} for d in pair}
    clean, wrong = max(levels["denoising"]), max(levels["noising"])
    assert max(levels["denoising"]) - min(levels["denoising"]) <= 1e-6 and abs(clean - 0.9995) < 5e-5
    assert max(levels["noising"]) - min(levels["noising"]) <= 1e-6 and wrong < 0.001
    assert says(PATCHING, "clean 1.00 (0.9995), corrupted 0.00 (below 0.001)")
    for site in SITES:
        for layer in LAYERS:
            for position in (0, NAME, 15):
                assert abs(pair["denoising"][site]["p"][(layer, key(position))] - wrong) <= 1e-6
                assert abs(pair["noising"][site]["p"][(layer, key(position))] - clean) <= 1e-6
            for position in (-3, -2):  # they differ between the runs and carry nothing either way
                assert abs(pair["denoising"][site]["p"][(layer, key(position))] - wrong) < 0.001
                assert abs(pair["noising"][site]["p"][(layer, key(position))] - clean) < 0.001
                assert all(abs(pair[d][site]["nld"][(layer, key(position))]) < 0.001 for d in pair)


def test_under_noise_every_necessary_site_is_sufficient(traced, noised):
    necessary = set()
    for s in SUBJECTS:
        for site in SITES:
            for (layer, position), value in noised[s][site].items():
                if value < 0.9:
                    necessary.add((site, layer, position))
                    assert traced[s][site][(layer, position)] >= 0.92 - TWO_DECIMALS, (s, site, layer, position)
    # Which sites those are: the ordinal's residual and attention in block 0, the last token's residual from
    # block 1 on and its attention in block 1.
    assert necessary == {("block_output", 0, key(ORDINAL)), ("attn_output", 0, key(ORDINAL)),
                         ("attn_output", 1, key(LAST)), *(("block_output", layer, key(LAST)) for layer in (1, 2, 3))}
    # Sufficient in part, not necessary at all.
    for s in SUBJECTS:
        for cell in (*((("mlp_output", layer, LAST)) for layer in (1, 2, 3)), ("attn_output", 2, LAST),
                     ("block_output", 1, ORDINAL), ("mlp_output", 0, ORDINAL)):
            site, layer, position = cell
            assert traced[s][site][(layer, key(position))] > traced[s][site][(layer, key(0))] + 0.05, (s, cell)
            assert noised[s][site][(layer, key(position))] >= 0.995, (s, cell)
    dens = [traced[s]["mlp_output"][(layer, key(LAST))] for s in SUBJECTS for layer in (1, 2, 3)]
    assert near(min(dens), 0.15) and near(max(dens), 0.86) and says(PATCHING, "(denoised 0.15-0.86)")
    # Necessary in part: the last token's residual leaving block 1, noised, loses what the ordinal's residual
    # leaving block 1, denoised, restores; block 0's attention at the ordinal with the ordinal corrupted.
    for s, value in (("name", 0.25), ("place", 0.62)):
        lost = noised[s]["block_output"][(1, key(LAST))]
        assert near(lost, value) and abs(lost - traced[s]["block_output"][(1, key(ORDINAL))]) <= 0.01
    assert near(noised["place"]["attn_output"][(0, key(ORDINAL))], 0.50)


def test_in_the_pair_sufficiency_and_necessity_coincide(pair, traced):
    both = set()
    for site in SITES:
        for cell, den in pair["denoising"][site]["p"].items():
            noi = pair["noising"][site]["p"][cell]
            assert (den >= 0.98 and noi <= 0.01) or (den <= 0.03 and noi >= 0.95), (site, cell, den, noi)
            if den >= 0.98:
                both.add((site, *cell))
            # The normalized logit difference agrees between the directions within 0.03.
            assert abs(pair["denoising"][site]["nld"][cell] - pair["noising"][site]["nld"][cell]) <= 0.03
    assert both == {("block_output", 0, key(-4)), ("attn_output", 0, key(-4)), ("attn_output", 1, key(-1)),
                    *(("block_output", layer, key(-1)) for layer in (1, 2, 3))}
    # The sites sufficient only under noise bring back 0.03 or less here.
    for site, layer, position in (*(("mlp_output", layer, -1) for layer in (1, 2, 3)), ("attn_output", 2, -1),
                                  ("block_output", 1, -4)):
        assert pair["denoising"][site]["p"][(layer, key(position))] <= 0.03
        assert traced["place"][site][(layer, key(LAST if position == -1 else ORDINAL))] >= 0.4
    # The partial logit shares named in the README.
    nld = {d: {site: pair[d][site]["nld"] for site in SITES} for d in pair}
    for (site, layer, position), (a, b) in {("mlp_output", 1, -1): (0.22, 0.25), ("attn_output", 2, -1): (0.13, 0.14),
                                            ("block_output", 1, -4): (0.13, 0.14)}.items():
        assert near(nld["denoising"][site][(layer, key(position))], a)
        assert near(nld["noising"][site][(layer, key(position))], b)


# -- outside causalab's runtime: a plain transformers forward with hooks written here -------------------------


@functools.cache
def plain():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from causalab_toy import models

    folder = models.install("entity")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval().requires_grad_(False)
    return model, AutoTokenizer.from_pretrained(folder)


def token(tokenizer, text: str) -> int:
    (found,) = tokenizer(text, add_special_tokens=False)["input_ids"]
    return found


def site_module(model, site: str, layer: int):
    block = model.model.layers[layer]
    return {"block_output": block, "attn_output": block.self_attn, "mlp_output": block.mlp}[site]


def forward(model, ids, edits=(), record=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The last token's softmax over the vocabulary, ``[rows, vocab]``, with ``edits`` applied ((module, fn)
    pairs: fn edits a copy of the module's output in place), and the value at ``record`` ((site, layer,
    per-row positions)) as it leaves that module."""
    model_, handles, captured = model, [], {}
    for module, fn in edits:
        def hook(mod, args, output, fn=fn):
            hidden = (output[0] if isinstance(output, tuple) else output).clone()
            fn(hidden)
            return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
        handles.append(module.register_forward_hook(hook))
    if record is not None:
        site, layer, where = record

        def grab(mod, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            captured["v"] = hidden[torch.arange(len(where)), torch.tensor(where)].clone()
        handles.append(site_module(model_, site, layer).register_forward_hook(grab))
    try:
        with torch.no_grad():
            probs = model_(input_ids=ids).logits[:, -1].softmax(-1)
    finally:
        for handle in handles:
            handle.remove()
    return probs, captured.get("v")


class Reference:
    """The base prompts of one run's rows, their subjects' token positions (found by the tokens' text), and
    the documented noise: sigma = 3 x the std of the subject's clean embeddings (float64, every value of every
    row), row r's draw ``randn((1, width))`` from ``torch.Generator().manual_seed(draw(r))``."""

    def __init__(self, rows):
        self.model, tokenizer = plain()
        self.rows = rows
        self.ids = torch.tensor([tokenizer(r["base"])["input_ids"] for r in rows])
        self.answer = torch.tensor([token(tokenizer, r["base_answer"]) for r in rows])
        words = [tokenizer.convert_ids_to_tokens(ids) for ids in self.ids.tolist()]
        self.subject = {"name": [w.index(r["entity"]) for w, r in zip(words, rows)],
                        "place": [w.index(r["place"]) for w, r in zip(words, rows)]}
        assert set(self.subject["place"]) == {ORDINAL} and set(self.subject["name"]) == {1, 3, 5, 7}
        embeddings = self.model.model.embed_tokens.weight
        self.sigma = {s: 3 * torch.stack([embeddings[self.ids[i, p]] for i, p in enumerate(where)]).double().std().item()
                      for s, where in self.subject.items()}

    def noise_edit(self, subject: str, draw=lambda row: (0 * 0x9E3779B1 + row) % 2**32):
        width = self.model.config.hidden_size
        noise = torch.stack([torch.randn((1, width), generator=torch.Generator().manual_seed(draw(r)))[0]
                             for r in range(len(self.rows))])
        where = torch.tensor(self.subject[subject])

        def edit(hidden):
            hidden[torch.arange(len(where)), where] += self.sigma[subject] * noise
        return (self.model.model.embed_tokens, edit)

    def p(self, probs):
        return probs.gather(1, self.answer[:, None])[:, 0]

    def positions(self, position) -> list[int]:
        if position == NAME:
            return self.subject["name"]
        return [position % 20] * len(self.rows)

    def patched(self, direction: str, subject: str, site: str, layer: int, position, draw=None) -> torch.Tensor:
        """p of the clean answer per row: one site of the clean run restored into the noised run (denoising)
        or one site of the noised run written into the clean run (noising)."""
        where = self.positions(position)
        noise = [self.noise_edit(subject, *(() if draw is None else (draw,)))]
        donor_edits, recipient_edits = ((), noise) if direction == "denoising" else (noise, ())
        _, value = forward(self.model, self.ids, donor_edits, record=(site, layer, where))

        def write(hidden):
            hidden[torch.arange(len(where)), torch.tensor(where)] = value
        return self.p(forward(self.model, self.ids, [*recipient_edits, (site_module(self.model, site, layer), write)])[0])

    def level(self, subject: str | None, draw=None) -> torch.Tensor:
        edits = [] if subject is None else [self.noise_edit(subject, *(() if draw is None else (draw,)))]
        return self.p(forward(self.model, self.ids, edits)[0])


@pytest.fixture(scope="module")
def reference(runs):
    out, _ = runs("entity_tracing_controls")
    return Reference([json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()])


def assert_rows_match(got: list, expected: torch.Tensor):
    assert len(got) == len(expected) and None not in got
    assert torch.allclose(torch.tensor(got, dtype=torch.float64), expected.double(), atol=1e-5, rtol=0), \
        (torch.tensor(got) - expected).abs().max()


def test_the_levels_match_a_plain_torch_reference(runs, reference):
    out, _ = runs("entity_tracing_controls")
    values = {m: json.loads((out / f"{m}.json").read_text())["values"] for m in ("p_clean", "p_name", "p_place")}
    assert_rows_match(values["p_clean"], reference.level(None))
    for s in SUBJECTS:
        assert_rows_match(values[f"p_{s}"], reference.level(s))


@pytest.mark.parametrize("direction, subject, site, layer, position", [
    ("denoising", "name", "block_output", 0, ORDINAL),
    ("denoising", "name", "attn_output", 2, LAST),
    ("denoising", "place", "mlp_output", 1, LAST),
    ("denoising", "place", "attn_output", 0, ORDINAL),
    ("noising", "name", "block_output", 1, LAST),
    ("noising", "place", "attn_output", 0, ORDINAL),
])
def test_noise_cells_match_a_plain_torch_reference(runs, reference, direction, subject, site, layer, position):
    name = f"entity_tracing_{site}" if direction == "denoising" else f"entity_noising_{site}"
    got = metric(runs, name, f"p_{subject}", field="values")[(layer, key(position))]
    expected = reference.patched(direction, subject, site, layer, position)
    assert_rows_match(got, expected)
    assert (expected.mean() - reference.level(subject).mean()).abs() > 0.05  # the cell is no level: it can fail


@pytest.mark.parametrize("direction, site, layer, position", [
    ("denoising", "mlp_output", 1, -1), ("noising", "attn_output", 0, -4), ("denoising", "block_output", 1, -1)])
def test_pair_cells_match_a_plain_torch_reference(runs, direction, site, layer, position):
    out, _ = runs(f"entity_{direction}_pair_{site}")
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    model, tokenizer = plain()
    prompts = {c: torch.tensor([tokenizer(r[c])["input_ids"] for r in rows]) for c in ("base", "counterfactual")}
    donor, recipient = ("base", "counterfactual") if direction == "denoising" else ("counterfactual", "base")
    where = [position % 20] * len(rows)
    _, value = forward(model, prompts[donor], record=(site, layer, where))

    def write(hidden):
        hidden[torch.arange(len(where)), torch.tensor(where)] = value
    probs, _ = forward(model, prompts[recipient], [(site_module(model, site, layer), write)])
    expected = probs.gather(1, torch.tensor([token(tokenizer, r["base_answer"]) for r in rows])[:, None])[:, 0]
    got = metric(runs, f"entity_{direction}_pair_{site}", "p", field="values")[(layer, key(position))]
    assert_rows_match(got, expected)


# The cells the README calls full (1.00) and partial, per subject: (site, layer, position).
FULL = {"name": [("block_output", 0, ORDINAL), ("attn_output", 0, ORDINAL), ("attn_output", 1, LAST),
                 *(("block_output", layer, LAST) for layer in (1, 2, 3))],
        "place": [("block_output", 0, ORDINAL), ("attn_output", 1, LAST),
                  *(("block_output", layer, LAST) for layer in (1, 2, 3))]}
PARTIAL = {"name": [("mlp_output", 0, ORDINAL), ("block_output", 1, ORDINAL), ("attn_output", 2, LAST),
                    *(("mlp_output", layer, LAST) for layer in (1, 2, 3))]}
PARTIAL["place"] = [("attn_output", 0, ORDINAL), *PARTIAL["name"]]


def test_the_full_and_partial_cells_are_the_tables(traced):
    for s in SUBJECTS:
        assert all(traced[s][site][(layer, key(p))] >= 0.995 for site, layer, p in FULL[s])
        cells_at_one = {(site, layer, p) for site in SITES for (layer, pk), v in traced[s][site].items()
                        for p in (ORDINAL, LAST) if pk == key(p) and v >= 0.995}
        assert cells_at_one == set(FULL[s])


def test_one_noise_draw_is_enough_for_the_pattern(reference, controls):
    """The README's redraws: generator seeds 1000 k + r, k = 1-4, beside the documented draw (k = 0)."""
    clean = controls["p_clean"]
    spans = {"name": [], "place": []}
    for s in SUBJECTS:
        partial = {cell: [] for cell in PARTIAL[s]}
        for k in range(5):
            draw = (lambda r: r) if k == 0 else (lambda r, k=k: 1000 * k + r)
            corrupted = reference.level(s, draw).mean().item()
            spans[s].append(corrupted)
            for cell in FULL[s]:
                assert reference.patched("denoising", s, *cell, draw=draw).mean() >= 0.99, (s, k, cell)
            for cell in PARTIAL[s]:
                value = reference.patched("denoising", s, *cell, draw=draw).mean().item()
                assert corrupted < value < min(0.99, clean), (s, k, cell, value)
                partial[cell].append(value)
        widest = max(max(v) - min(v) for v in partial.values())
        assert widest <= 0.13 + TWO_DECIMALS, (s, widest)
        if s == "place":
            ordinal = partial[("block_output", 1, ORDINAL)]
            assert near(min(ordinal), 0.49) and near(max(ordinal), 0.62) and near(max(ordinal) - min(ordinal), 0.13)
    assert near(min(spans["name"]), 0.05) and near(max(spans["name"]), 0.12)
    assert near(min(spans["place"]), 0.20) and near(max(spans["place"]), 0.33)
    assert says(TRACING, "the corrupted levels move to 0.05-0.12 (name) and 0.20-0.33 (ordinal)")


# -- one finding with 1 and with 2 threads -------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_the_two_hops_hold_with_one_and_two_threads(tmp_path, threads):
    """Block 0 at the ordinal and block 1 at the last token bring the answer back whole, for both subjects;
    the ordinal's residual leaving block 1 part of it."""
    document = json.loads((REAL / "entity_tracing_block_output.json").read_text())
    document["sweep"] = {"layer": [0, 1], "pos": [ORDINAL, LAST]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = api.run(path, out=tmp_path / "o")
    finally:
        torch.set_num_threads(previous)
    assert result.run["arithmetic"]["torch_threads"] == threads
    for s in SUBJECTS:
        p = {}
        for point in result.plan.points:
            v = dict(point.values)
            p[(v["layer"], v["pos"])] = json.loads((tmp_path / "o" / point.name / f"p_{s}.json").read_text())["summary"]["mean"]
        assert p[(0, ORDINAL)] >= 0.995 and p[(1, LAST)] >= 0.995 and p[(0, LAST)] < 0.3
        assert 0.2 <= p[(1, ORDINAL)] <= 0.7, (s, p)
