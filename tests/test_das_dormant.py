"""The dormant-pathway check of a trained DAS subspace (featurizer `das`, `part`), against plain torch.

Makelov et al. (2023) split a subspace patch into the part a readout reads and the part it does not. The
residual stream has no readout matrix of its own, so causalab's check splits the patch Δ = P_S (x_cf - x_base)
by the span the site's activations take on the training prompts (their principal directions holding 99% of
the variance): `varying` writes Δ's part inside that span, `still` the part outside, where a dormant pathway
would be. Here a plain transformers forward with a hook of its own recomputes both: the span from the
training prompts' activations, and each row's answer with the part written.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from causalab_core import api

REAL = Path(__file__).parent.parent / "documents" / "real"


def test_the_split_patch_is_what_plain_torch_computes(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from causalab_core.document import causal
    from causalab_core.document.schema import CausalModelSpec
    from causalab_toy import models
    from causalab_toy.causal import Weekdays

    doc = json.loads((REAL / "weekdays_das_dormant.json").read_text())
    doc["data"]["causal_model"].update(rows=60, seed=0)  # a sample: rank 1 moves part of the answers
    doc["sweep"].update(rank=[1], seed=[0])
    path = tmp_path / "dormant.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "o"
    api.run(path, out=out)
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]

    folder = models.install("weekdays")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    layer = doc["sweep"]["layer"][0]

    def last(prompt: str) -> torch.Tensor:
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        with torch.no_grad():
            return model(input_ids=ids, output_hidden_states=True).hidden_states[layer][0, -1]

    # The span: the training prompts' activations (base and counterfactual of each row), their principal
    # directions holding 99% of the variance.
    spec = doc["featurizers"]["das"]["train"]["data"]["causal_model"]
    training = causal.generate(Weekdays(), CausalModelSpec.model_validate(spec), "train")
    acts = torch.stack([last(r[k]) for r in training for k in ("base", "counterfactual")]).double()
    values, vectors = torch.linalg.eigh(torch.cov(acts.T, correction=0))
    values, vectors = values.flip(0), vectors.flip(1)
    kept = int((values.cumsum(0) / values.sum() < 0.99).sum()) + 1
    mine = vectors[:, :kept].float()

    answers = {}
    for part in ("varying", "still"):
        point = out / f"layer={layer},pos=-1,rank=1,seed=0,part={part}"
        state = load_file(point / "das.safetensors")
        span, q = state["variation"], state["rotation"][:, :1]
        assert span.shape == mine.shape, (span.shape, mine.shape)
        torch.testing.assert_close(span @ span.T, mine @ mine.T, atol=1e-3, rtol=0)
        got = json.loads((point / "iia_answer.json").read_text())["values"]
        expected = []
        for row in rows:
            base, cf = last(row["base"]), last(row["counterfactual"])
            delta = (cf - base) @ q @ q.T
            inside = delta @ span @ span.T
            write = inside if part == "varying" else delta - inside

            def hook(module, args, kwargs, write=write):
                hidden = (kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]).clone()
                hidden[:, -1] += write
                if "hidden_states" in kwargs:
                    return args, {**kwargs, "hidden_states": hidden}
                return (hidden, *args[1:]), kwargs

            handle = model.model.layers[layer].register_forward_pre_hook(hook, with_kwargs=True)
            try:
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([tokenizer(row["base"])["input_ids"]])).logits[0, -1]
            finally:
                handle.remove()
            choices = [row[c] for c in ("base_answer", "label_count", "label_day", "label_answer")]
            ids = [tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in choices]
            expected.append(float(choices[int(logits[ids].argmax())] == row["label_answer"]))
        assert got == expected, part
        answers[part] = sum(expected) / len(expected)
    # The finding, on this sample: the part inside the activations' span moves answers, the part outside none.
    assert answers["varying"] >= 0.2 and answers["still"] == 0, answers
