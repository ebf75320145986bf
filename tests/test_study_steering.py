"""Every claim and table cell of documents/real/README.md's section on weekdays_steering.json (with its control
weekdays_steering_random.json / weekdays_steering_random_last.json and weekdays_steering_pairs.json), against
one fresh run of each document.

Untrained forwards, the same on every machine up to float32 rounding: the tables are checked to their two
decimals. The rows and vectors of documents/data/weekdays_steering/ are checked against what its make.py
makes, and the vectors' norms and directions against a plain transformers forward of the shipped checkpoint.
Passes under OMP_NUM_THREADS=1 and 2.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from causalab_core import api
from tests.readme_sections import Section
from causalab_core.document.causal import rows_digest

ROOT = Path(__file__).parent.parent
REAL = ROOT / "documents" / "real"
DATA = ROOT / "documents" / "data" / "weekdays_steering"
README = (REAL / "README.md").read_text()
HEADING = "weekdays_steering.json"
TWO_DECIMALS = 0.005 + 1e-9
DOCUMENTS = {"steer": "weekdays_steering.json", "random_embed": "weekdays_steering_random.json",
             "random_last": "weekdays_steering_random_last.json", "pairs": "weekdays_steering_pairs.json"}
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SITES = {"embed": (0, -4), "last": (1, -1)}  # the two sites the study steers: (layer of block_input, position)
ALPHAS = (0, 0.5, 1, 1.5, 2, 3)
SEEDS = (0, 1, 2)


STUDY = Section(README, HEADING)
section, says, tables = STUDY.text, STUDY.says, STUDY.tables


def numbers(cell: str) -> tuple[float, ...]:
    return tuple(float(x) for x in cell.split(" / "))


def close(fresh, recorded) -> bool:
    return len(fresh) == len(recorded) and all(abs(a - b) <= TWO_DECIMALS for a, b in zip(fresh, recorded))


def load_make():
    spec = importlib.util.spec_from_file_location("weekdays_steering_make", DATA / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROWS = [json.loads(line) for line in (DATA / "rows.jsonl").read_text().splitlines()]


def tops(folder: Path) -> list[int | None]:
    """Per row, the k of the ``shift_k`` answer that is the top token over the vocabulary (None: none is)."""
    ranks = {k: json.loads((folder / f"shift_{k}.json").read_text())["values"] for k in range(7)}
    return [next((k for k in range(7) if ranks[k][i] == 0), None) for i in range(len(ROWS))]


def rows_where(**columns) -> list[int]:
    return [i for i, r in enumerate(ROWS) if all(r[c] == v for c, v in columns.items())]


def not_day(day: str) -> list[int]:
    return [i for i, r in enumerate(ROWS) if r["day"] != day]


def shares(top: list, rows: list[int]) -> tuple[float, float, float]:
    """(+1, other, unchanged) over ``rows``."""
    one = sum(top[i] == 1 for i in rows) / len(rows)
    same = sum(top[i] == 0 for i in rows) / len(rows)
    return one, 1 - one - same, same


def counted(top: list, rows: list[int]) -> Counter:
    """How many of ``rows`` shifted by each k."""
    return Counter(top[i] for i in rows)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One fresh run of each document: {key: (out folder, result)}."""
    found = {}
    for key, name in DOCUMENTS.items():
        out = tmp_path_factory.mktemp(key) / "o"
        found[key] = (out, api.run(REAL / name, out=out))
    return found


@pytest.fixture(scope="module")
def steered(runs):
    """(layer, position, alpha) -> per row top shift, for weekdays_steering.json."""
    out, result = runs["steer"]
    found = {}
    for point in result.plan.points:
        v = dict(point.values)
        found[(v["layer"], v["pos"], float(v["alpha"]))] = tops(out / point.name)
    return found


def vector_points(runs, key) -> dict[tuple[str, float], list]:
    """(vector file name, alpha) -> per row top shift, for a document that sweeps `vector`."""
    out, result = runs[key]
    return {(Path(dict(p.values)["vector"]).name, float(dict(p.values)["alpha"])): tops(out / p.name)
            for p in result.plan.points}


@pytest.fixture(scope="module")
def random_dirs(runs):
    """(site name, seed, alpha) -> per row top shift."""
    found = {}
    for site in SITES:
        for (name, alpha), top in vector_points(runs, f"random_{site}").items():
            assert name.startswith(f"random_{site}_seed")
            found[(site, int(name.removesuffix(".safetensors").split("seed")[1]), alpha)] = top
    return found


@pytest.fixture(scope="module")
def pairs(runs):
    """first day -> per row top shift, at alpha 1."""
    found = {}
    for (name, alpha), top in vector_points(runs, "pairs").items():
        day, following = name.removesuffix(".safetensors").removeprefix("last_").split("_to_")
        assert alpha == 1 and following == DAYS[(DAYS.index(day) + 1) % 7]
        found[day] = top
    return found


@pytest.fixture(scope="module")
def made():
    """make.py's module, its rows, its vectors made afresh, and the activations at every site the README names."""
    make = load_make()
    rows = make.rows()
    sites = {**make.SITES, "day_block1": (1, -4)}
    return make, rows, make.vectors(rows), make.activations([r["base"] for r in rows], sites)


# -- the rows and the vectors -------------------------------------------------------------------------------


def test_the_rows_are_every_setting_as_make_py_writes_them(runs):
    from causalab_toy import tasks

    make = load_make()
    assert (DATA / "rows.jsonl").read_text() == "".join(json.dumps(r) + "\n" for r in make.rows())
    # What the runs used (run.json records the rows' count and digest).
    for key in DOCUMENTS:
        assert runs[key][1].run["data"] == {"rows": 189, "sha256": rows_digest(ROWS)}, key
    assert len(ROWS) == 189 and len({(r["count"], r["day"]) for r in ROWS}) == 189
    assert says("27 counts x 7 days = 189 rows")
    for day in DAYS:
        assert sorted(int(r["count"]) for r in ROWS if r["day"] == day) == list(range(1, 28))
    # plus_k: the answer with the start day k days later, computed here without the task code.
    for r in ROWS:
        answer = (DAYS.index(r["day"]) + int(r["count"])) % 7
        assert r["base_answer"] == " " + DAYS[answer]
        assert [r[f"plus_{k}"] for k in range(1, 7)] == [" " + DAYS[(answer + k) % 7] for k in range(1, 7)]
        assert r["split"] == tasks.weekday_split(r["count"], r["day"])
    held_out = Counter(r["day"] for r in ROWS if r["split"] == "test")
    assert sum(held_out.values()) == 40 and held_out["Sunday"] == 5 and set(held_out.values()) == {5, 6}
    assert says("40 held out, 5 of them Sunday's") and says("5 or 6 settings per start day (5 on Sunday)")
    assert sum(1 for r in ROWS if r["day"] == "Sunday" and r["split"] == "train") == 22
    assert says("22 of the 27 Sunday settings are in the model's training set")


def test_the_model_answers_every_row(steered):
    assert all(top == 0 for layer, pos in SITES.values() for top in steered[(layer, pos, 0.0)])
    assert says("the model answers all 189")


def test_the_vectors_are_what_make_py_computes(made):
    import torch
    from safetensors.torch import load_file

    _, _, fresh, _ = made
    shipped = {p.name: load_file(p)["vector"] for p in DATA.glob("*.safetensors")}
    assert shipped.keys() == fresh.keys()
    assert len(shipped) == 2 * len(SEEDS) + 7
    for name, vector in shipped.items():
        assert vector.dtype == torch.float32 and vector.shape == (64,)
        assert torch.allclose(vector, fresh[name], rtol=1e-4, atol=1e-5), name


def test_the_random_directions_have_the_steering_vectors_norm(made):
    """Each random file: its seed's direction, at the norm of Monday - Sunday at its site (the norm the README
    states); the embeddings' difference also from the embedding matrix itself."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from causalab_toy import models

    make, rows, _, acts = made
    norms = {site: make.difference(acts[site], rows, "Monday", "Sunday").norm().item() for site in SITES}
    weights = load_file(models.CHECKPOINTS / "weekdays" / "model.safetensors")
    embedding = weights["model.embed_tokens.weight"]
    ids = AutoTokenizer.from_pretrained(models.CHECKPOINTS / "weekdays").convert_tokens_to_ids(["Monday", "Sunday"])
    assert (embedding[ids[0]] - embedding[ids[1]]).norm().item() == pytest.approx(norms["embed"], rel=1e-5)
    for site in SITES:
        for seed in SEEDS:
            vector = load_file(DATA / f"random_{site}_seed{seed}.safetensors")["vector"]
            assert vector.norm().item() == pytest.approx(norms[site], rel=1e-4)
            drawn = torch.randn(64, generator=torch.Generator().manual_seed(seed))
            assert torch.nn.functional.cosine_similarity(vector, drawn, dim=0).item() == pytest.approx(1, abs=1e-6)
    assert round(norms["embed"], 2) == 1.04 and round(norms["last"], 1) == 14.3
    assert says("(1.04 at the day's token in the embeddings, 14.3 at the last token entering block 1)")
    # The weak control: at the day's token entering block 1 the difference has the embeddings' norm, the stream ~14.
    day_block1 = make.difference(acts["day_block1"], rows, "Monday", "Sunday").norm().item()
    assert round(day_block1, 2) == 1.04 and 13.5 <= acts["day_block1"].norm(dim=1).mean().item() < 14.5
    assert 3 * day_block1 / acts["day_block1"].norm(dim=1).mean().item() < 0.25
    assert says("the vector there has the embeddings' norm (1.04) against a stream of norm about 14")


# -- weekdays_steering.json ---------------------------------------------------------------------------------


def test_statistic_reads_leave_every_row_eligible(runs):
    out, result = runs["steer"]
    for point in result.plan.points:
        for k in range(7):
            summary = json.loads((out / point.name / f"shift_{k}.json").read_text())["summary"]
            assert summary["eligible"] == summary["rows"] == 189, (point.name, k)
    assert says("189 of 189 scored")
    assert len(rows_where(day="Monday")) == len(rows_where(day="Sunday")) == 27


def test_every_row_answers_a_day_at_every_point(runs, steered, random_dirs, pairs):
    """"Other" is always another day: some shift_k is the top token on every row of every point."""
    for top in (*steered.values(), *random_dirs.values(), *pairs.values()):
        assert None not in top
    assert says("every such row here answers another day")


def test_the_steering_table_is_what_a_fresh_run_gives(steered):
    header, *rows = tables()[0]
    assert header[:3] == ["layer", "position", "alpha"]
    recorded = {(int(r[0]), int(r[1]), float(r[2])): (numbers(r[3]), numbers(r[4])) for r in rows}
    assert set(recorded) == {(layer, pos, a) for layer, pos in SITES.values() for a in map(float, ALPHAS)}
    for key, (sunday, others) in recorded.items():
        top = steered[key]
        fresh = shares(top, rows_where(day="Sunday"))
        assert close(fresh, sunday), (key, sunday, fresh)
        assert close(shares(top, not_day("Sunday")), others), (key, others, shares(top, not_day("Sunday")))


def test_the_embeddings_at_alpha_one_write_mondays_embedding(steered):
    sunday, held_out = rows_where(day="Sunday"), rows_where(day="Sunday", split="test")
    top = steered[(0, -4, 1.0)]
    assert all(top[i] == 1 for i in sunday) and len(held_out) == 5
    assert says("every Sunday row answers one day later (27 of 27; the 5 held-out ones too)")


def test_alpha_is_no_dial(steered):
    sunday = rows_where(day="Sunday")
    assert counted(steered[(0, -4, 0.5)], sunday) == {1: 9, 4: 18}
    assert counted(steered[(0, -4, 1.5)], sunday) == {1: 27}
    assert counted(steered[(0, -4, 2.0)], sunday) == {5: 27}
    assert set(counted(steered[(0, -4, 3.0)], sunday)) == {2, 3, 6}
    assert says("0.5 moves 9 Sunday rows by one and 18 by four (the answer of a Thursday start), 1.5 all 27 by "
                "one, 2 all 27 by five, 3 scatters them (by two, three and six)")


def test_it_is_sunday_to_monday_not_one_day_later(steered):
    others = not_day("Sunday")
    one, other, _ = shares(steered[(0, -4, 1.0)], others)
    assert round(one, 2) == 0.14 and round(other, 2) == 0.63
    highest = max(shares(steered[(layer, pos, a)], others)[0] for layer, pos in SITES.values() for a in ALPHAS)
    assert round(highest, 2) == 0.17
    # The claim could fail: other days' rows shifting by one as often as Sunday's.
    sunday = rows_where(day="Sunday")
    assert all(shares(steered[(layer, pos, a)], others)[0] < shares(steered[(layer, pos, a)], sunday)[0]
               for layer, pos in SITES.values() for a in (1, 1.5))
    assert says("the same vector shifts 0.14 by one at alpha 1 (at most 0.17 at any alpha, at either site) and "
                "0.63 otherwise")


def test_the_last_token_entering_block_one(steered):
    sunday, held_out = rows_where(day="Sunday"), rows_where(day="Sunday", split="test")
    assert counted(steered[(1, -1, 1.0)], sunday) == {1: 20, 4: 7}
    assert counted(steered[(1, -1, 1.5)], sunday)[1] == 24 and all(steered[(1, -1, 1.5)][i] == 1 for i in held_out)
    assert sum(steered[(1, -1, 1.0)][i] == 1 for i in held_out) == 3
    assert [round(shares(steered[(1, -1, a)], sunday)[0], 2) for a in (2.0, 3.0)] == [0.44, 0.30]
    assert says("20 of 27 Sunday rows shift by one at alpha 1 (the other 7 by four), 24 at 1.5 (0.89; 5 of the 5 "
                "held out), fewer past it (0.44 at 2, 0.30 at 3)")
    assert says("at 1.5 at the last token (5 of 5), not at 1 there (3 of 5)")


def test_the_other_two_sites_of_the_product_move_nothing(steered):
    assert {(layer, pos) for layer, pos, _ in steered} == {(0, -4), (0, -1), (1, -4), (1, -1)}
    for layer, pos in ((0, -1), (1, -4)):
        for alpha in ALPHAS:
            assert all(top == 0 for top in steered[(layer, pos, float(alpha))]), (layer, pos, alpha)
    assert says("the vector is zero there and nothing moves (unchanged 1.00 everywhere)")
    assert says("nothing moves either (unchanged 1.00 on every row up to alpha 3)")


# -- the random directions ----------------------------------------------------------------------------------


def test_the_random_table_is_what_a_fresh_run_gives(random_dirs):
    header, *rows = tables()[1]
    assert header[:3] == ["layer", "position", "alpha"] and "+1" in header[3] and "unchanged" in header[4]
    sites = {pos: name for name, pos in SITES.items()}
    recorded = {(sites[(int(r[0]), int(r[1]))], float(r[2])): (numbers(r[3]), numbers(r[4]), numbers(r[5]))
                for r in rows}
    assert set(recorded) == {(site, a) for site in SITES for a in map(float, ALPHAS[1:])}
    everyone = list(range(len(ROWS)))
    for (site, alpha), (one, same, same_all) in recorded.items():
        fresh = [random_dirs[(site, seed, alpha)] for seed in SEEDS]
        assert close([shares(t, rows_where(day="Sunday"))[0] for t in fresh], one), (site, alpha)
        assert close([shares(t, rows_where(day="Sunday"))[2] for t in fresh], same), (site, alpha)
        assert close([shares(t, everyone)[2] for t in fresh], same_all), (site, alpha)


def test_random_directions_move_answers_but_not_by_one_day(random_dirs, steered):
    sunday = rows_where(day="Sunday")
    # Up to alpha 1 no seed shifts a Sunday row by exactly one day, at either site; the difference of means does.
    assert all(random_dirs[(site, seed, a)][i] != 1
               for site in SITES for seed in SEEDS for a in (0.5, 1.0) for i in sunday)
    assert shares(steered[(0, -4, 1.0)], sunday)[0] == 1 and round(shares(steered[(1, -1, 1.0)], sunday)[0], 2) == 0.74
    # They do move answers: in the embeddings 12 of 27 Sunday rows, every seed, each by four; at the last token up
    # to 0.56.
    assert all(counted(random_dirs[("embed", seed, 1.0)], sunday) == {0: 15, 4: 12} for seed in SEEDS)
    assert round(max(1 - shares(random_dirs[("last", s, 1.0)], sunday)[2] for s in SEEDS), 2) == 0.56
    # Past alpha 1 some shift by one: at most 0.33, seed 1 at 1.5 at the last token.
    best = max(((shares(t, sunday)[0], key) for key, t in random_dirs.items()))
    assert round(best[0], 2) == 0.33 and best[1] == ("last", 1, 1.5)
    assert [round(shares(steered[(layer, pos, 1.5)], sunday)[0], 2) for layer, pos in SITES.values()] == [1.0, 0.89]
    # At alpha 0.5 in the embeddings they change no Sunday row; the difference changes all 27.
    assert all(random_dirs[("embed", s, 0.5)][i] == 0 for s in SEEDS for i in sunday)
    assert all(steered[(0, -4, 0.5)][i] != 0 for i in sunday)
    assert says("at alpha 1 they change 0.44 of the Sunday rows in the embeddings (every seed, each by four) and up "
                "to 0.56 at the last token, and shift none by exactly one day up to alpha 1 (0.00, every seed, both "
                "sites), where Monday - Sunday shifts 1.00 and 0.74")
    assert says("at most 0.33 (seed 1 at 1.5, the last token), against 1.00 and 0.89 for the difference at 1.5")


# -- the other pairs ----------------------------------------------------------------------------------------


def test_the_pairs_table_is_what_a_fresh_run_gives(pairs):
    header, *rows = tables()[2]
    assert header[0] == "pair"
    recorded = {r[0].split(" -> ")[0]: (numbers(r[1]), numbers(r[2])) for r in rows}
    assert list(recorded) == list(DAYS) and all(r[0] == f"{d} -> {DAYS[(i + 1) % 7]}" for i, (d, r) in
                                                enumerate(zip(DAYS, rows)))
    for day, (own, others) in recorded.items():
        assert close(shares(pairs[day], rows_where(day=day)), own), (day, own)
        assert close(shares(pairs[day], not_day(day)), others), (day, others)


def test_the_shift_is_not_particular_to_sunday(pairs):
    moved = {day: shares(pairs[day], rows_where(day=day))[0] for day in DAYS}
    assert {d for d, share in moved.items() if share == 1} == {"Monday", "Thursday", "Friday", "Saturday"}
    assert [round(moved[d], 2) for d in ("Wednesday", "Sunday", "Tuesday")] == [0.85, 0.74, 0.33]
    assert counted(pairs["Tuesday"], rows_where(day="Tuesday"))[5] == 15
    assert sum(share >= 0.74 - 1e-9 for share in moved.values()) == 6
    assert says("0.85 for Wednesday -> Thursday, 0.74 for Sunday -> Monday, and 0.33 for Tuesday -> Wednesday "
                "(15 of 27 by five)")
    assert says("six of seven pairs move 0.74 or more")


def test_the_two_routes_to_the_sunday_vector_agree(pairs, steered):
    """make.py's Sunday -> Monday file (a plain forward) and causalab's difference of means (`minus`) give the
    same top token on every row: so the random files' norm is the norm of the vector the document adds."""
    assert pairs["Sunday"] == steered[(1, -1, 1.0)]
    assert says("gives the top token of `weekdays_steering.json` at that point on every row")
