"""The shipped toy checkpoints: accurate on held-out prompts, loadable offline by key, reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from causalab_core import api
from causalab_core.errors import PlanError
from causalab_toy import models, tasks
from causalab_toy.train import SPECS, accuracy, train

ROOT = Path(__file__).parents[3]
THRESHOLDS = {"weekdays": 0.99, "entity": 0.95}


def load(name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = models.CHECKPOINTS / name
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


LARGER = {"ioi": 13_000_000}
"""The IOI model is as wide as the circuits issue asks (width 256, 4 layers: attribution is measured on a model
wider than 64): 3.2 million float32 weights."""


def test_the_package_ships_the_promised_models():
    assert {"weekdays", "entity", "induction", "ioi",
            *(f"{t}-s{s}" for t in ("weekdays", "entity") for s in (0, 1, 2))} <= set(models.names())
    for name in models.names():
        size = sum(p.stat().st_size for p in (models.CHECKPOINTS / name).iterdir())
        assert size < LARGER.get(name, 4_000_000), f"{name} is {size} bytes: keep shipped checkpoints small"
        assert (models.CHECKPOINTS / name / "chat_template.jinja").is_file()


@pytest.mark.parametrize("name", sorted(THRESHOLDS))
def test_a_shipped_model_answers_held_out_prompts(name):
    if name not in models.names():
        pytest.fail(f"{name} is not shipped")
    model, tokenizer = load(name)
    assert accuracy(model, tokenizer, SPECS[name]["task"], n=400) >= THRESHOLDS[name]


@pytest.mark.parametrize("name", [f"{t}-s{s}" for t in ("weekdays", "entity") for s in (0, 1, 2)])
def test_a_seeded_checkpoint_answers_as_its_training_recorded(name):
    """Three checkpoints of each task from seeds 0-2, with what the task computes held out: each fits its
    training split; held out, entity's generalize and weekdays' answer nothing right (a table, not arithmetic)."""
    model, tokenizer = load(name)
    facts = json.loads((models.CHECKPOINTS / name / "training.json").read_text())
    assert facts["seed"] == int(name[-1]) and facts["held_out"] == "computed"
    assert accuracy(model, tokenizer, facts["task"], n=200, split="train") == facts["train_accuracy"] == 1
    held_out = accuracy(model, tokenizer, facts["task"], n=200)
    assert held_out == 0 if name.startswith("weekdays") else held_out >= 0.95, held_out


def test_held_out_prompts_never_appear_in_training():
    for task in tasks.TASKS:
        train_prompts = {r[k] for r in tasks.rows(task, 3000, "train") for k in ("base", "counterfactual")}
        test_prompts = {r[k] for r in tasks.rows(task, 300, "test") for k in ("base", "counterfactual")}
        assert not train_prompts & test_prompts, task


def test_training_is_deterministic_from_the_seed(tmp_path):
    first = train("weekdays", tmp_path / "a", steps=3, log=lambda *a, **k: None)
    again = train("weekdays", tmp_path / "b", steps=3, log=lambda *a, **k: None)
    assert first["test_accuracy"] == again["test_accuracy"]
    a = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "b" / "model.safetensors").read_bytes()
    model, _ = load_dir(tmp_path / "a")
    assert model.config.num_hidden_layers == SPECS["weekdays"]["layers"]


def load_dir(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_a_key_loads_offline_from_the_hugging_face_cache(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = models.install("weekdays")
    assert snapshot.name == models.revision("weekdays")
    model = AutoModelForCausalLM.from_pretrained("causalab-toy/weekdays", local_files_only=True, cache_dir=tmp_path / "hub")
    shipped, _ = load("weekdays")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), shipped.state_dict().values()))


def test_a_wrong_revision_is_refused(write_doc):
    doc = json.loads((ROOT / "documents" / "real" / "weekdays_layer_sweep.json").read_text())
    doc["model"]["revision"] = "0" * 40
    doc["data"] = {"rows": tasks.rows("weekdays", 3, "test")}
    with pytest.raises(PlanError, match=r"\$\.model\.revision: causalab-toy/weekdays is at revision"):
        api.plan(write_doc(doc))


def test_the_real_documents_pin_the_shipped_revisions():
    for path in sorted((ROOT / "documents").rglob("*.json")):
        model = json.loads(path.read_text()).get("model", {})
        if model.get("key", "").startswith("causalab-toy/"):
            name = model["key"].removeprefix("causalab-toy/")
            assert model.get("revision") == models.revision(name), path


def test_the_recipe_learns_in_its_first_steps(tmp_path):
    """CI checks the recipe on a few steps, never a full retrain (that is `python -m causalab_toy train weekdays`,
    about two minutes on 2 cores: held-out accuracy 0.77-1.0 over seeds 0-5, 2026-12-03). In 150 steps the loss
    falls from chance over the 60-token vocabulary (ln 60 = 4.09) to about chance among the seven days
    (ln 7 = 1.95; 1.96 here, 2026-12-07): the recipe's data, model and schedule learn which tokens answer."""
    logged = []
    train("weekdays", tmp_path / "weekdays", steps=150, log=lambda line, **_: logged.append(line))
    losses = [float(line.split(" loss ")[1].split()[0]) for line in logged if " loss " in line]
    assert losses[0] > 3.8 and losses[-1] < 2.4, logged


def test_nnsight_loads_a_toy_key_offline(tmp_path):
    import subprocess
    import sys

    code = (
        "from causalab_toy.models import install; install('weekdays');"
        "from causalab_nnterp.compat import apply; apply();"
        "import nnsight; m = nnsight.LanguageModel('causalab-toy/weekdays');"
        "from causalab_toy import tasks; row = tasks.rows('weekdays', 1, 'test')[0];"
        "\nwith m.trace(row['base']):\n    out = m.lm_head.output.save()\n"
        "print(m.tokenizer.decode(out[0, -1].argmax()).strip(), row['base_answer'].strip(), sep='|')"
    )
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    predicted, expected = done.stdout.strip().splitlines()[-1].split("|")
    assert predicted == expected


@pytest.mark.parametrize("name", sorted(THRESHOLDS))
def test_a_chat_prompt_starts_with_the_one_bos_the_model_was_trained_with(name):
    """The template renders the BOS; causalab adds none behind it, so chat and plain prompts both start with one."""
    from causalab_core.compiler.prompts import tokenize_inputs
    from causalab_toy.tokenizer import CHAT_TEMPLATE

    _, tokenizer = load(name)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "tell me"}]
    row = {"chat": messages, "plain": "Q : hello"}
    texts = tokenize_inputs(["chat", "plain"], (row,), tokenizer)
    bos = tokenizer.bos_token_id
    for name_ in ("chat", "plain"):
        ids = texts[name_][0].ids
        assert ids[0] == bos and ids.count(bos) == 1, (name_, ids)
    chat = texts["chat"][0]
    # The turn's text still maps to its own tokens: the BOS shifts them by one and takes no characters.
    words = ["<s>", "user", ":", "hello", ".", "assistant", ":", "hi", ".", "user", ":", "tell", "me", ".", "assistant", ":"]
    assert tokenizer.convert_ids_to_tokens(list(chat.ids)) == words
    start, end = chat.segments["user[1]"]
    assert chat.text[start:end] == "tell me" and chat.offsets[0] == (0, len("<s>"))
