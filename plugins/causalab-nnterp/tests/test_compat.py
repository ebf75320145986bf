"""The nnterp shim: still needed, and still enough. Fails the day either stops being true."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)


def test_nnterp_still_needs_the_shim():
    done = python("import nnterp")
    assert done.returncode != 0, (
        "nnterp now imports on this nnsight without causalab_nnterp.compat: remove the shim"
    )
    assert "nnsight.intervention.tracing" in done.stderr


def test_the_shim_is_enough_to_load_and_trace(tiny_llama):
    done = python(f"""
        from transformers import AutoTokenizer
        from causalab_nnterp.compat import APPLIED, import_nnterp
        nnterp = import_nnterp()
        model = nnterp.StandardizedTransformer({str(tiny_llama)!r}, tokenizer=AutoTokenizer.from_pretrained({str(tiny_llama)!r}))
        with model.trace("Q: what day is two days after Monday? A:"):
            hidden = model.layers_output[1].save()
            logits = model.logits.save()
        print(sorted(APPLIED), tuple(hidden.shape), tuple(logits.shape))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("]")[0] == "['Envoy._model', 'nnsight.intervention.tracing'"
    assert "(1, 13, 32) (1, 13, 71)" in done.stdout
