"""The output folder never destroys what causalab did not write, and survives interruptions."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from causalab_core import api
from causalab_core.results import added, folder as output
from causalab_core.plugins.contracts import PositionResolver, Resolved
from causalab_core.errors import OutputError, PlanError
from causalab_core import hookimpl
from causalab_core.plugins.registry import build_registry
from causalab_testing.data import sweep_document, weekday_rows


def cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "causalab_core", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def doc(tiny_llama, write_doc):
    document = sweep_document(str(tiny_llama))
    document["sweep"] = {"layers": [0, 1], "pos": [-4, -1]}
    return write_doc(document, weekday_rows(6))


@pytest.fixture
def absent_model_doc(tmp_path):
    """A document whose model is not on this machine: any refusal before compiling still names the output."""
    document = sweep_document(str(tmp_path / "no-such-model"))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(3)))
    path = tmp_path / "absent.json"
    path.write_text(json.dumps(document))
    return path


def user_folder(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("my notes")
    (path / "raw").mkdir()
    (path / "raw" / "measurements.csv").write_text("a,b\n1,2\n")
    return snapshot(path)


# -- what --force replaces ------------------------------------------------------


def test_force_refuses_a_folder_of_user_files_and_keeps_every_byte(absent_model_doc, tmp_path):
    out = tmp_path / "mine"
    before = user_folder(out)
    result = cli("run", absent_model_doc, "--out", out, "--force")
    # OutputError, not the PlanError of the missing model: refused before compiling.
    assert result.returncode == 2 and result.stderr.startswith("OutputError:"), result.stderr
    assert result.stderr.strip().count("\n") == 0 and "notes.txt" in result.stderr
    assert snapshot(out) == before


def test_force_replaces_a_previous_causalab_output_plot_included(doc, tmp_path):
    out = tmp_path / "o"
    assert cli("run", doc, "--out", out).returncode == 0
    assert cli("plot", out).returncode == 0 and (out / "iia.png").is_file()
    result = cli("run", doc, "--out", out, "--force")
    assert result.returncode == 0, result.stderr
    assert not (out / "iia.png").exists() and (out / "manifest.json").is_file()


@pytest.mark.parametrize("tamper", ["added", "changed", "empty folder"])
def test_force_refuses_a_causalab_output_the_user_added_to_or_changed(doc, tmp_path, tamper):
    out = tmp_path / "o"
    assert cli("run", doc, "--out", out).returncode == 0
    if tamper == "added":
        (out / "layers=0,pos=-4" / "my-analysis.ipynb").write_text("{}")
        named = "layers=0,pos=-4/my-analysis.ipynb"
    elif tamper == "changed":
        (out / "run.json").write_text('{"edited": true}')
        named = "run.json (changed since causalab wrote it)"
    else:
        (out / "figures").mkdir()
        named = "figures/"
    before = snapshot(out)
    result = cli("run", doc, "--out", out, "--force")
    assert result.returncode == 2 and named in result.stderr, result.stderr
    assert snapshot(out) == before and (tamper != "empty folder" or (out / "figures").is_dir())


def test_an_empty_folder_is_written_into(doc, tmp_path):
    (tmp_path / "empty").mkdir()
    assert cli("run", doc, "--out", tmp_path / "empty").returncode == 0
    assert (tmp_path / "empty" / "run.json").is_file()


def test_the_folder_holding_the_document_is_never_replaced(tiny_llama, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "NOTES.md").write_text("notes")
    (project / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(4)))
    (project / "exp.json").write_text(json.dumps(sweep_document(str(tiny_llama))))
    before = snapshot(project)
    for out in (project, tmp_path):  # the document's folder, and one above it
        result = cli("run", project / "exp.json", "--out", out, "--force")
        assert result.returncode == 2 and "which this run reads" in result.stderr, result.stderr
    assert snapshot(project) == before


def test_the_folder_holding_the_data_is_never_replaced(tiny_llama, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(4)))
    (tmp_path / "docs").mkdir()
    document = sweep_document(str(tiny_llama))
    document["data"] = {"path": "../data/rows.jsonl"}
    (tmp_path / "docs" / "exp.json").write_text(json.dumps(document))
    result = cli("run", tmp_path / "docs" / "exp.json", "--out", tmp_path / "data", "--force")
    assert result.returncode == 2 and "rows.jsonl, which this run reads" in result.stderr, result.stderr
    assert (tmp_path / "data" / "rows.jsonl").is_file()


@pytest.mark.parametrize("swept", [False, True], ids=["literal", "swept"])
def test_the_folder_holding_a_featurizer_file_the_run_loads_is_never_replaced(tiny_llama, write_doc, tmp_path, swept):
    trained = sweep_document(str(tiny_llama), layers=(1,), positions=(-4,))
    trained["featurizers"] = {"das": {"kind": "das", "rank": 2, "train": {
        "data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 1, "batch_size": 8, "lr": 0.05, "seed": 3}}}
    trained["writes"]["patch"]["featurizer"] = "das"
    trained["sweep"] = {}
    for spec in (trained["reads"]["cf_resid"], trained["writes"]["patch"]):
        spec.update(layer=1, position=-4)
    api.run(write_doc(trained, weekday_rows(6), "train.json"), out=tmp_path / "runA")
    trained_file = next((tmp_path / "runA").rglob("*.safetensors"))
    using = {**trained, "featurizers": {"das": {"kind": "das", "rank": 2}}}
    rel = str(trained_file.relative_to(tmp_path))
    if swept:
        using["featurizers"]["das"]["load"] = {"sweep": "f"}
        using["sweep"] = {"f": [rel]}
    else:
        using["featurizers"]["das"]["load"] = rel
    path = write_doc(using, name="use.json")
    before = snapshot(tmp_path / "runA")
    result = cli("run", path, "--out", tmp_path / "runA", "--force")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"{trained_file.name}, which this run reads" in result.stderr
    assert snapshot(tmp_path / "runA") == before


def test_the_current_folder_and_home_are_never_replaced(absent_model_doc, tmp_path):
    home = tmp_path / "home"
    before = user_folder(home)
    env = {**os.environ, "HOME": str(home)}
    for out, cwd, why in ((".", home, "current folder"), ("~", tmp_path, "home folder"),
                          (str(home), tmp_path, "home folder"), ("/", tmp_path, "filesystem root")):
        result = cli("run", absent_model_doc, "--out", os.path.expanduser(out) if out != "~" else str(home),
                     "--force", cwd=cwd, env=env)
        assert result.returncode == 2 and why in result.stderr, (out, result.stderr)
    assert snapshot(home) == before


# -- where --out may be -----------------------------------------------------------


@pytest.mark.parametrize("where", ["under a file", "in /proc", "a file"])
def test_an_output_path_that_cannot_be_written_is_refused_before_compiling(absent_model_doc, tmp_path, where):
    (tmp_path / "file.txt").write_text("x")
    out = {"under a file": tmp_path / "file.txt" / "out", "in /proc": Path("/proc/causalab-out"),
           "a file": tmp_path / "file.txt"}[where]
    result = cli("run", absent_model_doc, "--out", out)
    assert result.returncode == 2 and result.stderr.startswith("OutputError:"), result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert (tmp_path / "file.txt").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission bits")
def test_a_read_only_parent_is_refused_before_compiling(absent_model_doc, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    result = cli("run", absent_model_doc, "--out", locked / "out")
    assert result.returncode == 2 and "cannot write" in result.stderr


def test_a_symbolic_link_is_refused(doc, tmp_path):
    target = tmp_path / "target"
    before = user_folder(target)
    (tmp_path / "link").symlink_to(target)
    result = cli("run", doc, "--out", tmp_path / "link", "--force")
    assert result.returncode == 2 and "symbolic link" in result.stderr
    assert snapshot(target) == before


# -- the swap under interruption ---------------------------------------------------


def old_and_new(tmp_path):
    out = tmp_path / "o"
    output.write_folder(out, {"run.json": b"old\n", "a/x.json": b"1\n"}, force=False)
    old = snapshot(out)
    return out, old, {"run.json": b"new\n", "b/y.json": b"2\n"}


@pytest.mark.parametrize("step", ["written", "old moved aside", "swapped"])
def test_an_interruption_at_each_step_of_the_swap_leaves_the_old_or_the_new_folder(tmp_path, monkeypatch, step):
    out, old, files = old_and_new(tmp_path)

    def interrupt(name):
        if name == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(output, "_step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        output.write_folder(out, files, force=True)
    now = snapshot(out)
    new = {**files, "manifest.json": now.get("manifest.json")}
    assert now in (old, new)
    monkeypatch.setattr(output, "_step", lambda name: None)
    output.write_folder(out, files, force=True)  # the next run finds a causalab folder and replaces it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_a_run_killed_between_the_two_renames_is_recovered_by_the_next_run(tmp_path, monkeypatch):
    out, old, files = old_and_new(tmp_path)
    pid = os.fork()
    if pid == 0:  # the child: dies hard with the old folder moved aside and the new one not yet in place
        monkeypatch.setattr(output, "_step", lambda name: os._exit(9) if name == "old moved aside" else None)
        output.write_folder(out, files, force=True)
        os._exit(0)
    os.waitpid(pid, 0)
    assert not out.exists() and (tmp_path / f".o.replaced.{pid}").is_dir()
    output.check_out(out, force=True)  # the next run on this path puts the old folder back
    assert snapshot(out) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


@pytest.mark.parametrize("stage", ["the old folder", "the unfinished folder"])
def test_a_deletion_cut_short_is_recognised_and_finished_by_the_next_run(tmp_path, monkeypatch, stage):
    out, old, files = old_and_new(tmp_path)
    calls = []

    def interrupt(name):
        calls.append(name)
        if stage == "the unfinished folder" and name == "written":
            raise KeyboardInterrupt  # the run is stopped, and removing its unfinished folder is stopped too
        if name == "removed manifest.json":
            raise KeyboardInterrupt

    monkeypatch.setattr(output, "_step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        output.write_folder(out, files, force=True)
    assert "removed manifest.json" in calls
    left = [p for p in tmp_path.iterdir() if p.name != "o"]
    assert len(left) == 1 and not (left[0] / "manifest.json").exists()  # no longer a causalab output by its manifest
    assert snapshot(out) in (old, {**files, "manifest.json": snapshot(out).get("manifest.json")})
    monkeypatch.setattr(output, "_step", lambda name: None)
    output.write_folder(out, files, force=True)  # the next run on the path finishes the deletion
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def _plotted(out: Path) -> None:
    output.write_folder(out, {"run.json": b"{}\n", "document.json": b"{}\n"}, force=False)
    added.add_file(out, "iia.png", b"first plot")


@pytest.mark.parametrize("step", ["part manifest.json", "announced", "part iia.png", "file written"])
def test_a_plot_killed_at_any_moment_leaves_a_folder_causalab_still_owns(tmp_path, monkeypatch, step):
    out = tmp_path / "o"
    _plotted(out)
    pid = os.fork()
    if pid == 0:  # the child dies hard at this moment of adding the file
        monkeypatch.setattr(output, "_step", lambda name: os._exit(9) if name == step else None)
        added.add_file(out, "iia.png", b"second plot")
        os._exit(0)
    os.waitpid(pid, 0)
    assert (out / "iia.png").read_bytes() in (b"first plot", b"second plot")
    assert output.first_foreign(out) is None  # nothing there counts as a user's file
    added.add_file(out, "iia.png", b"third plot")  # plotting again works, and cleans up
    listing = json.loads((out / "manifest.json").read_text())
    assert "pending" not in listing and sorted(p.name for p in out.iterdir()) == ["document.json", "iia.png",
                                                                                  "manifest.json", "run.json"]
    _killed_again = os.fork()
    if _killed_again == 0:
        monkeypatch.setattr(output, "_step", lambda name: os._exit(9) if name == step else None)
        added.add_file(out, "iia.png", b"fourth plot")
        os._exit(0)
    os.waitpid(_killed_again, 0)
    output.write_folder(out, {"run.json": b"new\n"}, force=True)  # and --force replaces the folder
    assert snapshot(out).keys() == {"run.json", "manifest.json"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_a_part_file_of_a_dead_plot_is_removed_by_force(doc, tmp_path):
    out = tmp_path / "mo3"
    assert cli("run", doc, "--out", out).returncode == 0
    assert cli("plot", out, "--metric", "iia").returncode == 0
    (out / ".iia.png.999999.part").write_bytes(b"half a png")  # what a plot killed mid-write left
    (out / ".notes.txt.999999.part").write_text("mine")  # named alike, but for no file causalab wrote
    result = cli("run", doc, "--out", out, "--force")
    assert result.returncode == 2 and ".notes.txt.999999.part" in result.stderr, result.stderr
    (out / ".notes.txt.999999.part").unlink()
    result = cli("run", doc, "--out", out, "--force")
    assert result.returncode == 0, result.stderr
    assert not (out / ".iia.png.999999.part").exists() and output.first_foreign(out) is None


def test_leftovers_of_a_dead_run_are_removed_and_look_alike_user_folders_are_not(doc, tmp_path):
    out = tmp_path / "o"
    assert cli("run", doc, "--out", out).returncode == 0
    dead = 999_999  # no such process
    unfinished = tmp_path / f".o.{dead}.abcd.tmp"  # what a killed run leaves: marked as causalab's, half written
    unfinished.mkdir()
    (unfinished / output.PARTIAL).touch()
    (unfinished / "half.json").write_text("{")
    (tmp_path / f".o.replaced.{dead}").mkdir()  # an empty folder it had moved aside
    mine = tmp_path / f".o.{dead}.final.tmp"  # a user's folder that happens to look like one
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    result = cli("run", doc, "--out", out, "--force")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".o")) == [mine.name]
    assert (mine / "thesis.txt").read_text() == "years of work"


def test_force_never_deletes_a_user_file_named_like_a_leftover(doc, tmp_path):
    out = tmp_path / "o"
    assert cli("run", doc, "--out", out).returncode == 0
    (out / ".notes.2024.v1.tmp").mkdir()
    (out / ".notes.2024.v1.tmp" / "thesis.txt").write_text("x")
    result = cli("run", doc, "--out", out, "--force")
    assert result.returncode == 2 and ".notes.2024.v1.tmp/" in result.stderr
    assert (out / ".notes.2024.v1.tmp" / "thesis.txt").read_text() == "x"


def test_a_replaced_folder_keeps_its_mode_and_a_new_one_follows_the_umask(doc, tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert cli("run", doc, "--out", private).returncode == 0
    assert private.stat().st_mode & 0o777 == 0o700
    old = os.umask(0o027)
    try:
        output.write_folder(tmp_path / "fresh", {"run.json": b"{}\n"}, force=False)
    finally:
        os.umask(old)
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o750


def test_odd_output_paths_are_one_line(doc, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for out, needle in ((tmp_path / "link" / "missing" / "..", "symbolic link"),
                        (tmp_path / ("a" * 240), "longer than 200 bytes"),
                        (tmp_path / ("b" * 300) / "o", "too long")):
        result = cli("run", doc, "--out", out)
        assert result.returncode == 2 and needle in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert len(result.stderr) < 600


def test_a_fifo_in_a_previous_output_is_named_not_read(doc, tmp_path):
    out = tmp_path / "o"
    assert cli("run", doc, "--out", out).returncode == 0
    (out / "run.json").unlink()
    os.mkfifo(out / "run.json")
    result = subprocess.run([sys.executable, "-m", "causalab_core", "run", str(doc), "--out", str(out), "--force"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "run.json" in result.stderr


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_run_prints_interrupted_and_leaves_nothing(tiny_llama, write_doc, tmp_path, sig, code):
    document = sweep_document(str(tiny_llama))
    document["sweep"] = {"layers": [0, 1, 2, 3], "pos": list(range(-8, 0))}
    path = write_doc(document, weekday_rows(2000))  # about 20 s of work on 2 cores
    out = tmp_path / "o"
    # SIGINT as a terminal delivers it (the test runner may have it ignored, and a child inherits that).
    process = subprocess.Popen([sys.executable, "-m", "causalab_core", "run", str(path), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(6)  # well inside the run: imports done, compiling or running
    assert process.poll() is None, process.communicate()
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    *progress, last = stderr.strip().splitlines()
    # Without a terminal a run says where it is after each chunk (a fast machine may finish one before the signal).
    assert process.returncode == code and last == "Interrupted", stderr
    assert all(re.fullmatch(r"causalab: \d+ of \d+ points done, .*", line) for line in progress), stderr
    assert not out.exists()
    # Nothing else is left, but the points the run completed, kept for --resume (causalab_core.results.resume).
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert [p.name for p in left] in ([], [".o.resume"])
    assert all((p / "resume.json").is_file() and any((p / "points").iterdir()) for p in left)


def _mapped(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="watches the process's mapped libraries")
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_causalab_starts_prints_interrupted(absent_model_doc, tmp_path, sig, code):
    process = subprocess.Popen([sys.executable, "-m", "causalab_core", "run", str(absent_model_doc),
                                "--out", str(tmp_path / "o")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # The plugins load torch before any command starts: a signal then lands while causalab starts up.
    deadline = time.monotonic() + 60
    while not _mapped(process.pid, "libtorch") and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.poll() is None, process.communicate()
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code and stderr.strip() == "Interrupted", stderr
    assert not (tmp_path / "o").exists()


# -- point folders -------------------------------------------------------------------


class WordResolver(PositionResolver):
    """A third party's position form: {"word": text}, always the last token (the text only names it)."""

    name = "word"

    def accepts(self, spec):
        return isinstance(spec, dict) and set(spec) == {"word"}

    def check(self, spec):
        if not isinstance(spec["word"], str):
            raise ValueError("`word` must be a string")

    def resolve(self, spec, row):
        return Resolved(positions=(len(row.ids) - 1,))


def word_registry():
    module = types.ModuleType("causalab_word")
    module.DISTRIBUTION = "causalab-word"
    module.causalab_position_resolvers = hookimpl(lambda: [WordResolver])
    return build_registry(extra=(module,))


def test_sweep_values_never_write_outside_the_output_folder(doc, tmp_path):
    document = json.loads(doc.read_text())
    words = ["../../../victim", "a/b", "[:=]", "[=:]", "x" * 300, "$(touch pwned)", "\n", ".", "..", "A", "a"]
    document["sweep"]["pos"] = [{"word": w} for w in words]
    doc.write_text(json.dumps(document))
    (tmp_path / "victim").write_text("keep")
    out = tmp_path / "deep" / "er" / "o"
    result = api.run(doc, out=out, registry=word_registry())
    names = {p.name for p in result.plan.points}
    assert len(names) == len(result.plan.points) == 2 * len(words)  # one folder per point
    for name in names:
        assert "/" not in name and not name.startswith(".") and len(name.encode()) < 255
        assert (out / name / "iia.json").is_file()
    assert len({n.lower() for n in names}) == len(names)  # distinct on a case-blind filesystem too
    assert (tmp_path / "victim").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "doc.json", "rows.jsonl", "victim"]
    # Each point's files hold its own value.
    for point in result.plan.points:
        assert json.loads((out / point.name / "iia.json").read_text())["point"] == dict(point.values)


def test_a_repeated_sweep_value_is_refused(doc):
    document = json.loads(doc.read_text())
    document["sweep"]["layers"] = [0, 1, 0]
    doc.write_text(json.dumps(document))
    with pytest.raises(Exception, match=r"\$\.sweep\.layers\[2\]: repeats \$\.sweep\.layers\[0\]"):
        api.plan(doc)


def test_point_folders_never_collide_even_when_labels_would(tmp_path, monkeypatch):
    from causalab_core.document import sweep

    monkeypatch.setattr(sweep, "_NAME_LIMIT", 5)  # force the long-name hash on every point
    monkeypatch.setattr(sweep, "_hash", lambda value: "samehash")
    document = types.SimpleNamespace(sweep={"layers": [10, 11]})
    with pytest.raises(PlanError, match="would share the folder"):
        sweep.points(document)


def test_a_file_outside_the_folder_is_never_written(tmp_path):
    with pytest.raises(OutputError, match="not inside the output folder"):
        output.write_folder(tmp_path / "o", {"../escape.json": b"{}"}, force=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_signal_another_thread_receives_still_waits_for_the_end_of_the_swap():
    """The kernel hands a process-directed signal to any thread not blocking it (torch's workers among them),
    and Python then raises in the main thread: the swap must still run to its end before the signal acts."""
    script = """
import os, signal, threading, time
from causalab_core.results.folder import signals_deferred
go = threading.Event()
worker = threading.Thread(target=lambda: (go.wait(), os.kill(os.getpid(), signal.SIGINT)))
worker.start()  # before the block, as torch's threads are: it does not share a mask the block sets
ended = []
try:
    with signals_deferred():
        go.set()
        worker.join()
        time.sleep(0.2)  # Python runs handlers between bytecodes: an undeferred signal lands here
        ended.append(True)
except KeyboardInterrupt:
    print("interrupted after the block" if ended else "interrupted inside the block")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert result.stdout.strip() == "interrupted after the block", result.stdout + result.stderr


def test_a_point_folder_is_named_by_its_value_where_the_readme_rule_allows():
    """README: a value of letters, digits and `_ . - + @ [ ]` names its folder as itself, a float included;
    only an odd or long one gets a hash (and values that differ by case alone)."""
    from causalab_core.document import sweep

    document = types.SimpleNamespace(sweep={"alpha": [0, 0.5, 1.0, 1e-05, 2.5e+100], "pos": [-1, "entity", "a b"]})
    names = [point for point, _ in sweep.points(document)]
    assert names[:3] == ["alpha=0,pos=-1", "alpha=0,pos=entity", names[2]]
    assert {n.split(",")[0] for n in names} == {"alpha=0", "alpha=0.5", "alpha=1.0", "alpha=1e-05", "alpha=2.5e+100"}
    assert names[2].startswith("alpha=0,pos=a_b-") and len(names[2]) == len("alpha=0,pos=a_b-") + 8
