"""An interrupted sweep resumes (`causalab run --resume`) and ends byte for byte as an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from causalab_core import api
from causalab_core.errors import OutputError
from causalab_core.results.resume import chunk_size, store_path
from causalab_testing.data import sweep_document, weekday_rows

CAUSALAB = str(Path(sys.executable).parent / "causalab")


@pytest.fixture(scope="module")
def long_sweep(tmp_path_factory, tiny_llama):
    """40 points (3 chunks of 16, 16, 8) over 300 rows on the tiny Llama, and its uninterrupted run."""
    folder = tmp_path_factory.mktemp("long")
    document = sweep_document(str(tiny_llama), layers=(0, 1, 2, 3), positions=tuple(range(-10, 0)))
    path = folder / "doc.json"
    path.write_text(json.dumps(document))
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(300)))
    done = subprocess.run([CAUSALAB, "run", str(path), "--out", str(folder / "whole")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert chunk_size(40) == 16
    return path, folder / "whole"


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _kill_after_first_chunk(path: Path, out: Path, sig: int, *options: str) -> subprocess.Popen:
    process = subprocess.Popen([CAUSALAB, "run", str(path), "--out", str(out), *options], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    points = store_path(out) / "points"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if points.is_dir() and any(p.name.isdigit() for p in points.iterdir()):
            break
        time.sleep(0.02)
    assert process.poll() is None, process.communicate()
    process.send_signal(sig)
    process.communicate(timeout=60)
    return process


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_sweep_killed_midway_resumes_to_the_same_bytes(long_sweep, tmp_path, sig):
    path, whole = long_sweep
    out = tmp_path / "o"
    killed = _kill_after_first_chunk(path, out, sig)
    assert killed.returncode == (-9 if sig == signal.SIGKILL else 130)
    assert not out.exists()
    kept = sorted(int(p.name) for p in (store_path(out) / "points").iterdir() if p.name.isdigit())
    assert kept == list(range(len(kept))) and 0 < len(kept) < 40, kept  # each point whole, in order

    told = []
    api.run(path, out=out, resume=True, points_done=lambda done, total: told.append((done, total)))
    assert told[0] == (len(kept), 40)  # only the points not kept were run
    assert tree(out) == tree(whole)  # every byte: metric files, documents, run.json, manifest.json
    assert not store_path(out).exists()


def test_a_forced_run_over_a_previous_output_resumes_as_its_interruption_line_says(long_sweep, tmp_path):
    """`run --force` over an earlier output, stopped: `--resume` (what the Interrupted run says) replaces it too."""
    path, whole = long_sweep
    out = tmp_path / "o"
    earlier = json.loads(path.read_text())
    earlier["sweep"]["pos"] = [-1]  # an earlier, other run on that folder
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    (tmp_path / "rows.jsonl").write_bytes((path.parent / "rows.jsonl").read_bytes())
    api.run(tmp_path / "earlier.json", out=out)
    killed = _kill_after_first_chunk(path, out, signal.SIGINT, "--force")
    assert killed.returncode == 130 and (out / "layers=0,pos=-1").is_dir()  # the old output stays till the new is whole
    api.run(path, out=out, resume=True)
    assert tree(out) == tree(whole) and not store_path(out).exists()


def test_a_resume_of_a_changed_document_is_refused(long_sweep, tmp_path):
    path, _ = long_sweep
    out = tmp_path / "o"
    _kill_after_first_chunk(path, out, signal.SIGKILL)
    changed = tmp_path / "changed.json"
    document = json.loads(path.read_text())
    document["metrics"]["iia"]["label"] = "base_answer"
    changed.write_text(json.dumps(document))
    (tmp_path / "rows.jsonl").write_bytes((path.parent / "rows.jsonl").read_bytes())
    done = subprocess.run([CAUSALAB, "run", str(changed), "--out", str(out), "--resume"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"OutputError: --out {out}: --resume refused: the interrupted run came from another "
                           "document, plan; run without --resume to start over\n")
    assert store_path(out).exists() and not out.exists()  # what was kept is still there

    fresh = subprocess.run([CAUSALAB, "run", str(changed), "--out", str(out)], capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr  # without --resume: starts over, and the old store goes
    assert not store_path(out).exists()


def test_nothing_to_resume_is_one_line(long_sweep, tmp_path):
    path, _ = long_sweep
    with pytest.raises(OutputError, match=r"nothing to resume \(no interrupted run of it left \.o\.resume\)"):
        api.run(path, out=tmp_path / "o", resume=True)
    with pytest.raises(OutputError, match="--resume needs --out"):
        api.run(path, resume=True)


def test_a_long_run_without_a_terminal_prints_one_line_per_chunk(long_sweep, tmp_path):
    path, _ = long_sweep
    done = subprocess.run([CAUSALAB, "run", str(path), "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(",")[0] for line in lines] == ["causalab: 16 of 40 points done", "causalab: 32 of 40 points done",
                                                      "causalab: 40 of 40 points done"], lines
    assert "24 left, about" in lines[0] and lines[2].endswith("0 left")


def test_a_resume_with_another_batch_size_is_refused(long_sweep, tmp_path):
    path, _ = long_sweep
    out = tmp_path / "o"
    _kill_after_first_chunk(path, out, signal.SIGKILL)
    with pytest.raises(OutputError, match="the interrupted run came from another batch size; run without --resume"):
        api.run(path, out=out, resume=True, batch_size=3)


def test_a_kept_point_changed_since_is_computed_again(long_sweep, tmp_path):
    path, whole = long_sweep
    out = tmp_path / "o"
    _kill_after_first_chunk(path, out, signal.SIGKILL)
    kept = store_path(out) / "points" / "0"
    metric = next(kept.glob("*.json"))
    metric.write_text(metric.read_text().replace("0.", "9.", 1))  # a value edited by hand
    api.run(path, out=out, resume=True)
    assert tree(out) == tree(whole)


@pytest.mark.parametrize("spoil", ["user file", "symlink"])
def test_a_store_holding_what_causalab_did_not_write_is_refused(long_sweep, tmp_path, spoil):
    path, _ = long_sweep
    out = tmp_path / "o"
    store = store_path(out)
    if spoil == "user file":
        _kill_after_first_chunk(path, out, signal.SIGKILL)
        (store / "notes.txt").write_text("mine")
    else:
        (tmp_path / "elsewhere").mkdir()
        store.symlink_to(tmp_path / "elsewhere")
    done = subprocess.run([CAUSALAB, "run", str(path), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith(f"OutputError: --out {out}: .o.resume beside it ")
    assert done.stderr.count("\n") == 1
    assert (store / "notes.txt").read_text() == "mine" if spoil == "user file" else store.is_symlink()


def test_a_kept_file_changed_after_its_point_was_counted_is_refused_not_written_out(tmp_path):
    from causalab_core.results.resume import open_store

    store = open_store(tmp_path / "o", {"document": "d"}, resume=False)
    store.keep(0, {"document.json": b"{}\n", "iia.json": b'{"values": [1.0]}\n'}, {})
    assert store.done() == {0} and store.files(0)["iia.json"] == b'{"values": [1.0]}\n'
    kept = store.points / "0" / "iia.json"
    kept.write_bytes(b'{"values": [0.0]}\n')  # after done() counted it, before the output is assembled
    with pytest.raises(OutputError) as caught:
        store.files(0)
    assert str(caught.value) == f"'{kept}' changed since causalab wrote it; the run's numbers cannot be read from it"
    kept.unlink()
    with pytest.raises(OutputError, match="iia.json' is missing; the run's numbers cannot be read from it"):
        store.files(0)
    store.remove()


THIRD_PARTY = '''"""A third party's metric, installed beside causalab's."""
from causalab_core import hookimpl
from causalab_metrics.answers import IIA


class Again(IIA):
    name = "iia_again"


@hookimpl
def causalab_metrics():
    return [Again]
'''


def install_third_party(site: Path) -> Path:
    """A real distribution (dist-info with its entry point, and its module) on a folder of ``sys.path``."""
    info = site / "causalab_third-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: causalab-third\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[causalab]\nthird = causalab_third\n")
    module = site / "causalab_third.py"
    module.write_text(THIRD_PARTY)
    return module


@pytest.mark.parametrize("used", [False, True])
def test_a_resume_binds_to_the_plugins_the_run_uses(long_sweep, tmp_path, monkeypatch, used):
    """A plugin edited between the interruption and the resume: one the run does not use changes nothing, and
    the run resumes; one it uses (its metric) makes the resume a one-line refusal."""
    path, _ = long_sweep
    module = install_third_party(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    document = json.loads(path.read_text())
    if used:
        document["metrics"]["again"] = {**document["metrics"]["iia"], "kind": "iia_again"}
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(document))
    (tmp_path / "rows.jsonl").write_bytes((path.parent / "rows.jsonl").read_bytes())
    out = tmp_path / "o"
    _kill_after_first_chunk(doc, out, signal.SIGKILL)
    module.write_text(THIRD_PARTY + "# edited after the interruption\n")
    done = subprocess.run([CAUSALAB, "run", str(doc), "--out", str(out), "--resume"], capture_output=True, text=True)
    if used:
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == (f"OutputError: --out {out}: --resume refused: the interrupted run came from another "
                               "causalab (causalab-third changed); run without --resume to start over\n")
        assert store_path(out).exists() and not out.exists()
    else:
        assert done.returncode == 0, done.stderr
        assert (out / "layers=0,pos=-1" / "iia.json").is_file() and not store_path(out).exists()
