"""Every write causalab makes survives a full or odd filesystem: a disk that fills while a point is kept,
while the output folder is written or while a plot is added, and a mount point given as --out.

Each case mounts a small tmpfs of its own (root only; CI runs as root) and unmounts it at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import causalab_core
from causalab_core import api
from causalab_core.results import folder as output, manifest
from causalab_core.errors import OutputError
from causalab_core.results.resume import store_path
from causalab_testing.data import sweep_document, weekday_rows

from causalab_report.commands import commands  # `causalab plot` is causalab-report's

CAUSALAB = str(Path(sys.executable).parent / "causalab")
FULL = "No space left on device"


class Disk:
    """A tmpfs mounted at ``path``; ``fill()`` takes what space is left, ``resize()`` grows it."""

    def __init__(self, path: Path):
        self.path = path

    def mount(self, size: str, *options: str) -> None:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs",
                               str(self.path)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")

    def resize(self, size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)

    def shrink(self) -> None:
        """Leave about one page free, with no file of the test's own in the way."""
        stat = os.statvfs(self.path)
        self.resize(f"{(stat.f_blocks - stat.f_bfree) * stat.f_frsize // 1024 + 4}k")

    def fill(self) -> Path:
        filler = self.path / ".filler"
        try:
            with open(filler, "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * 4096)
        except OSError:
            pass
        return filler


@pytest.fixture
def disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    path = tmp_path / "disk"
    path.mkdir()
    made = Disk(path)
    yield made
    while subprocess.run(["mountpoint", "-q", str(path)]).returncode == 0:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_llama):
    """20 points (chunks of 16 and 4) on 6 rows, and its uninterrupted run."""
    folder = tmp_path_factory.mktemp("sweep")
    document = sweep_document(str(tiny_llama), layers=(0, 1, 2, 3), positions=(-5, -4, -3, -2, -1))
    (folder / "doc.json").write_text(json.dumps(document))
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(6)))
    api.run(folder / "doc.json", out=folder / "whole")
    return folder / "doc.json", folder / "whole"


def tree(folder: Path) -> dict[str, bytes]:
    """Every file but run.json and the manifest (run.json holds the sources' digest, not the run's numbers)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in ("run.json", "manifest.json")}


def plot(out: Path):
    return CliRunner().invoke(commands(), ["plot", str(out), "--metric", "iia"])


def cli(*args):
    return subprocess.run([CAUSALAB, *map(str, args)], capture_output=True, text=True, timeout=300)


def one_line(done, *needles):
    """Exit 2, nothing on stdout, and one OutputError line after the progress lines a run prints."""
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    *progress, last = done.stderr.splitlines()
    assert last.startswith("OutputError: ") and all(" points done, " in line for line in progress), done.stderr
    assert all(n in last for n in needles), done.stderr


def kept_points(out: Path) -> list[int]:
    points = store_path(out) / "points"
    return sorted(int(p.name) for p in points.iterdir() if p.name.isdigit()) if points.is_dir() else []


def test_a_disk_that_fills_while_points_are_kept_is_one_line_and_keeps_them(sweep, disk):
    doc, whole = sweep
    disk.mount("100k")  # the store's first file and a few points, not twenty
    out = disk.path / "o"
    one_line(cli("run", doc, "--out", out), FULL, "cannot keep a completed point", "for --resume")
    kept = kept_points(out)
    assert 0 < len(kept) < 20 and not out.exists()
    assert [p.name for p in (store_path(out) / "points").iterdir() if not p.name.isdigit()] == []  # nothing half kept
    disk.resize("10m")
    told = []
    api.run(doc, out=out, resume=True, points_done=lambda done, total: told.append(done))
    assert told[0] == len(kept)  # only the points not kept were run
    assert tree(out) == tree(whole) and not store_path(out).exists()


def refused(call, *needles) -> str:
    with pytest.raises(OutputError) as caught:
        call()
    assert all(n in str(caught.value) for n in needles), str(caught.value)
    return str(caught.value)


def test_a_disk_too_full_for_the_store_is_refused_before_any_work(sweep, disk):
    doc, _ = sweep
    disk.mount("64k")
    disk.fill()
    done = cli("run", doc, "--out", disk.path / "o")
    one_line(done, FULL, ".o.resume")
    assert sorted(p.name for p in disk.path.iterdir()) == [".filler"]  # no store, no folder


def test_a_disk_that_fills_while_the_output_is_written_keeps_the_points(sweep, disk):
    doc, whole = sweep
    disk.mount("600k")  # every point kept (about 400k), but not the output folder beside them
    out = disk.path / "o"
    refused(lambda: api.run(doc, out=out), FULL, "cannot write it", "run again with --resume")
    assert kept_points(out) == list(range(20)) and not out.exists()
    assert [p.name for p in disk.path.iterdir()] == [".o.resume"]  # no unfinished folder left beside
    disk.resize("10m")
    api.run(doc, out=out, resume=True)
    assert tree(out) == tree(whole)


def test_an_empty_mount_point_is_written_into_and_replaced_in_place(sweep, disk):
    doc, whole = sweep
    disk.mount("10m")
    api.run(doc, out=disk.path)
    assert tree(disk.path) == tree(whole) and output.first_foreign(disk.path) is None
    assert subprocess.run(["mountpoint", "-q", str(disk.path)]).returncode == 0  # still the mount, written into
    assert len(causalab_core.load(disk.path).records["rows"]) == 20 * 3 * 6
    assert not [p for p in disk.path.parent.iterdir() if p.name.startswith(".")]  # no store, no leftovers
    # Not empty: refused without --force, replaced in place with it.
    refused(lambda: api.run(doc, out=disk.path), "not empty")
    assert plot(disk.path).exit_code == 0 and (disk.path / "iia.png").is_file()
    api.run(doc, out=disk.path, force=True)
    assert tree(disk.path) == tree(whole) and not (disk.path / "iia.png").exists()


def test_a_sweep_interrupted_on_a_mount_point_resumes_into_it(sweep, disk):
    doc, whole = sweep
    disk.mount("10m")

    def stop(done, total):
        if done == 16:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.run(doc, out=disk.path, points_done=stop)
    assert kept_points(disk.path) == list(range(16)) and list(disk.path.iterdir()) == []
    api.run(doc, out=disk.path, resume=True)
    assert tree(disk.path) == tree(whole) and not store_path(disk.path).exists()


def test_a_full_mount_point_keeps_the_previous_output_whole(sweep, disk):
    doc, whole = sweep
    disk.mount("10m")
    api.run(doc, out=disk.path)
    before = {**tree(disk.path), "manifest.json": (disk.path / "manifest.json").read_bytes()}
    disk.shrink()  # the new files, staged inside the mount first, do not fit
    refused(lambda: api.run(doc, out=disk.path, force=True), FULL)
    assert {**tree(disk.path), "manifest.json": (disk.path / "manifest.json").read_bytes()} == before
    assert sorted(p.name for p in disk.path.iterdir() if p.name.startswith(".")) == []  # nothing staged left
    assert output.first_foreign(disk.path) is None and causalab_core.load(disk.path).records["rows"]


def test_a_read_only_mount_point_is_refused_before_any_work(sweep, disk):
    doc, _ = sweep
    disk.mount("1m", "ro")
    one_line(cli("run", doc, "--out", disk.path), "cannot write in it")
    assert not store_path(disk.path).exists()


def test_a_run_killed_while_writing_a_mount_point_in_place_is_cleared_by_the_next(tmp_path, disk, monkeypatch):
    disk.mount("1m")
    output.write_folder(disk.path, {"run.json": b"old\n", "a/x.json": b"1\n"}, force=False)
    pid = os.fork()
    if pid == 0:  # dies hard with the old files gone and the new ones not yet moved up
        monkeypatch.setattr(output, "_step", lambda name: os._exit(9) if name == "old removed" else None)
        output.write_folder(disk.path, {"run.json": b"new\n", "b/y.json": b"2\n"}, force=True)
        os._exit(0)
    os.waitpid(pid, 0)
    assert (disk.path / output.PARTIAL).is_file()  # marked: causalab's, half written
    output.write_folder(disk.path, {"run.json": b"new\n", "b/y.json": b"2\n"}, force=False)  # no --force needed
    assert sorted(str(p.relative_to(disk.path)) for p in disk.path.rglob("*")) == [
        "b", "b/y.json", "manifest.json", "run.json"]


def test_a_plot_on_a_full_disk_is_one_line_and_the_run_stays_readable(sweep, disk):
    doc, _ = sweep
    disk.mount("10m")
    out = disk.path / "o"
    api.run(doc, out=out)
    filler = disk.fill()
    failed = plot(out)
    assert failed.exit_code == 2 and failed.stdout == "" and failed.stderr.count("\n") == 1, failed.stderr
    assert failed.stderr.startswith("OutputError: ") and FULL in failed.stderr and "iia.png" in failed.stderr
    assert not (out / "iia.png").exists() and output.first_foreign(out) is None
    assert "iia.png" not in json.loads((out / "manifest.json").read_text()).get("pending", {})  # nor announced
    assert len(causalab_core.load(out).records["rows"]) == 20 * 3 * 6  # the folder is as the run left it
    filler.unlink()
    assert plot(out).exit_code == 0 and (out / "iia.png").is_file()
    assert "iia.png" in json.loads((out / "manifest.json").read_text())["files"]


def test_a_bind_mount_of_the_same_filesystem_is_written_in_place(tmp_path):
    """os.path.ismount does not see a bind mount within one filesystem; renaming it still fails (EBUSY)."""
    if os.geteuid() != 0:
        pytest.skip("bind mounts need root (CI runs as root)")
    (tmp_path / "src").mkdir()
    target = tmp_path / "bound"
    target.mkdir()
    if subprocess.run(["mount", "--bind", str(tmp_path / "src"), str(target)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        assert not os.path.ismount(target) and output.mount_point(target)
        output.write_folder(target, {"run.json": b"{}\n", "p/iia.json": b"1\n"}, force=False)
        output.write_folder(target, {"run.json": b"{}\n", "q/iia.json": b"2\n"}, force=True)
        assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == [
            "manifest.json", "q", "q/iia.json", "run.json"]
        assert manifest.read_run(target)["q/iia.json"] == b"2\n"
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)
