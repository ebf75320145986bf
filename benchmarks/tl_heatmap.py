"""The activation-patching heatmap through TransformerLens 4.x, run by benchmarks/sweep.py --heatmap.

    benchmarks/.venv-tl/bin/python benchmarks/tl_heatmap.py SPEC_JSON

Runs in TransformerLens' own environment (benchmarks/setup-transformerlens.sh):
it needs a newer transformers than causalab pins, so it imports nothing of
causalab. SPEC_JSON names the local checkpoint folder, the rows (base and
counterfactual prompts of one token length, answers) and how many rows to warm
up on. The model is the same checkpoint loaded with transformers and wrapped
by ``TransformerBridge.boot_transformers(model_dir, hf_model=..., tokenizer=...)``;
``transformer_lens.patching.get_act_patch_resid_pre`` runs every layer x every
position, patching the counterfactual's resid_pre (the block input) into the
base run (the checkpoint's own weights: compatibility mode without weight
processing), scored by the mean logit difference (counterfactual answer minus
base answer) at the last position. Timed: the counterfactual's
``run_with_cache`` plus the patching call, after an untimed warm-up on a few
rows. Prints one JSON line: seconds, peak resident memory above the loaded
weights (sampled every millisecond), the grid [layer][position], versions.
Nothing reaches the network (HF offline variables are set before any import).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # get_act_patch_* draw a progress bar

import json  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    spec = json.loads(sys.argv[1])
    import torch
    import transformer_lens
    import transformers
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.patching import get_act_patch_resid_pre
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    model_dir = spec["model_dir"]
    hf = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    bridge = TransformerBridge.boot_transformers(model_dir, hf_model=hf, tokenizer=tokenizer)
    # The legacy hook names (blocks.L.hook_resid_pre) without HookedTransformer's weight processing
    # (fold_ln, centering): the same computation as the checkpoint's own forward, so grids compare.
    bridge.enable_compatibility_mode(disable_warnings=True, no_processing=spec.get("no_processing", True))
    bridge.eval().requires_grad_(False)

    rows = spec["rows"]

    def ids(texts):
        return torch.tensor([tokenizer(t)["input_ids"] for t in texts])

    base, cf = ids([r["base"] for r in rows]), ids([r["counterfactual"] for r in rows])
    target = torch.tensor([tokenizer(r["cf_answer"])["input_ids"][0] for r in rows])
    other = torch.tensor([tokenizer(r["base_answer"])["input_ids"][0] for r in rows])

    def heatmap(n: int) -> torch.Tensor:
        t, o = target[:n], other[:n]

        def metric(logits):
            last = logits[:, -1]
            return (last.gather(1, t[:, None]) - last.gather(1, o[:, None])).mean()

        with torch.inference_mode():
            _, cache = bridge.run_with_cache(cf[:n])
            grid = get_act_patch_resid_pre(bridge, base[:n], cache, metric)
        return grid

    heatmap(spec.get("warmup_rows", 1))  # untimed: first forwards, kernels
    process_peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            process_peak[0] = max(process_peak[0], rss())
            time.sleep(0.001)

    baseline = rss()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    grid = heatmap(len(rows))
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    layers, positions = grid.shape
    print(json.dumps({
        "seconds": seconds, "peak_mib": max(0, process_peak[0] - baseline) / 2**20,
        "grid": grid.float().tolist(), "forwards": 1 + layers * positions,
        "versions": {"transformer_lens": getattr(transformer_lens, "__version__", None)
                     or _dist_version("transformer-lens"),
                     "transformers": transformers.__version__, "torch": torch.__version__,
                     "threads": torch.get_num_threads()},
    }))


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
