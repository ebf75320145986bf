"""A sweep's completed points, kept beside --out while the run goes on, so an interrupted run can resume.

A run with ``--out NAME`` runs its points in chunks and keeps each completed
point in ``.NAME.resume/points/<index>`` (written as a temporary folder, then
renamed: a point is there whole or not at all). ``resume.json`` says which
document, plan, causalab and engine the points came from; ``--resume`` runs
only the points not kept yet, and refuses a store made from anything else.
When the run ends, the output folder is swapped in as always and the store is
removed; a run without ``--resume`` removes a dead run's store and starts over.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from causalab_core.errors import OutputError, echo, shorten
from causalab_core.results.folder import pid_running, remove, signals_deferred
from causalab_core.results.manifest import UNTRUSTED, sha256_of

MARK = "causalab resume"
CHUNKS = 10
"""A sweep runs in about this many chunks (a failure costs one chunk, remote: one job)."""
MIN_CHUNK = 16
"""Points per chunk at least: each chunk repeats the clean and counterfactual forwards its points share."""


def chunk_size(points: int) -> int:
    """Points per chunk: a tenth of the sweep, and never fewer than 16 (so small sweeps run in one or two)."""
    return max(MIN_CHUNK, math.ceil(points / CHUNKS))


def plan_digest(plan: Any) -> str:
    """sha256 of the whole plan as canonical JSON (bytes by their own sha256)."""
    shown = lambda v: hashlib.sha256(v).hexdigest() if isinstance(v, bytes) else str(v)  # noqa: E731
    return hashlib.sha256(json.dumps(plan.to_dict(), sort_keys=True, default=shown).encode()).hexdigest()


def store_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.resume")


@dataclass
class Store:
    path: Path
    state: dict[str, Any]
    made: list[Path] = field(default_factory=list)
    """Folders above --out that did not exist and were made for the store (removed with it while empty)."""

    @property
    def points(self) -> Path:
        return self.path / "points"

    def done(self) -> set[int]:
        """Indices of the points kept whole: every file as the point's own ``.digests.json`` lists it (a
        point whose files were changed or removed since is not done, and runs again)."""
        return {int(p.name) for p in self.points.iterdir()
                if p.name.isdigit() and p.is_dir() and not p.is_symlink() and _digests(p) == _listed(p)}

    def keep(self, index: int, files: dict[str, bytes], details: dict[str, Any]) -> None:
        """Keep one completed point (its files by path inside the point) and what the engine said.

        A disk that fills (or any other refusal to write) is one line; the points kept before stay."""
        tmp = self.points / f".{index}.{os.getpid()}.tmp"
        try:
            self._keep(tmp, index, files, details)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            kept = len(self.done())
            after = (f"{kept} point{'s' if kept != 1 else ''} kept before stay there for --resume" if kept else
                     "no point was kept yet, so there is nothing to resume")  # and the empty store goes
            raise OutputError(f"{shorten(str(self.path))}: cannot keep a completed point: {exc.strerror or exc}; "
                              f"{after}") from None

    def _keep(self, tmp: Path, index: int, files: dict[str, bytes], details: dict[str, Any]) -> None:
        tmp.mkdir()
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        # The point's digests travel with it (renamed in with it), so keeping a point writes only the point.
        (tmp / DIGESTS).write_text(json.dumps({rel: sha256_of(data) for rel, data in sorted(files.items())}))
        with signals_deferred():
            target = self.points / str(index)
            if target.is_dir() and not target.is_symlink():  # a point kept before, changed since: redone
                remove(target)
            if self.state["details"] != details:  # once per run, or when the engine's word changes
                self.state["details"] = details
                _write_state(self.path, self.state)
            tmp.rename(target)

    def remote_jobs(self) -> dict[str, dict[str, Any]]:
        """Jobs sent to a remote server for this run (an interrupted run's too), by the id the server gave
        each: what the engine recorded when it sent one (its points' names...). ``--resume`` collects them."""
        return self.state.setdefault("remote_jobs", {})

    def note_job(self, job_id: str, record: dict[str, Any] | None) -> None:
        """Keep one sent job's record (``None``: forget it), written at once, before the job is waited for."""
        jobs = self.remote_jobs()
        if record is None:
            jobs.pop(job_id, None)
        else:
            jobs[job_id] = record
        try:
            with signals_deferred():
                _write_state(self.path, self.state)
        except OSError as exc:
            raise OutputError(f"{shorten(str(self.path))}: cannot keep the id of remote job {echo(job_id)}: "
                              f"{exc.strerror or exc}") from None

    def files(self, index: int) -> dict[str, bytes]:
        """A kept point's files, each checked against the digests kept with it (as the output folder's
        readers check its manifest): one changed since the point was kept is refused, never written out."""
        folder = self.points / str(index)
        listed = _listed(folder) or {}
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
                 if p.is_file() and p.name != DIGESTS}
        for rel in sorted(set(listed) | set(files)):
            if rel not in files:
                raise OutputError(f"{echo(str(folder / rel))} is missing; {UNTRUSTED}")
            if listed.get(rel) != sha256_of(files[rel]):
                raise OutputError(f"{echo(str(folder / rel))} changed since causalab wrote it; {UNTRUSTED}")
        return files

    def remove(self) -> None:
        remove(self.path)
        for folder in self.made:  # deepest first; one that now holds the output folder stays
            try:
                folder.rmdir()
            except OSError:
                break


DIGESTS = ".digests.json"


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): sha256_of(p.read_bytes()) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != DIGESTS}


def _listed(folder: Path) -> dict[str, str] | None:
    try:
        listed = json.loads((folder / DIGESTS).read_text())
    except (OSError, ValueError):
        return None
    return listed if isinstance(listed, dict) else None


def _write_state(path: Path, state: dict[str, Any]) -> None:
    part = path / f".resume.json.{os.getpid()}.part"
    try:
        part.write_text(json.dumps(state, indent=1) + "\n")
        part.replace(path / "resume.json")
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((path / "resume.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("written_by") != MARK:
        return None
    if not isinstance(state.get("pid"), int) or state["pid"] <= 0 or not isinstance(state.get("identity"), dict):
        return None
    return state


def _foreign(path: Path) -> str | None:
    """The first entry of a store that causalab does not put there, or None."""
    for entry in sorted(path.iterdir()):
        if entry.name not in ("resume.json", "points") and not entry.name.startswith(".resume.json."):
            return entry.name
    points = path / "points"
    if points.is_symlink() or not points.is_dir():
        return "points"
    for entry in sorted(points.iterdir()):
        if not (entry.name.isdigit() or entry.name.startswith(".")) or entry.is_symlink():
            return f"points/{entry.name}"
    return None


def has_store(out: Path) -> bool:
    return _read_state(store_path(out.resolve())) is not None


def was_forced(out: Path) -> bool:
    """Whether the interrupted run on ``out`` had --force: its --resume may replace what that run would have."""
    state = _read_state(store_path(out.resolve()))
    return bool(state and state.get("force"))


def open_store(out: Path, identity: dict[str, str], *, resume: bool, force: bool = False) -> Store:
    """The store for a run on ``out``: the interrupted run's (``resume``, same identity) or a new one."""
    path = store_path(out.resolve())
    where = f"--out {shorten(str(out))}"
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{where}: {path.name} beside it is not causalab's store (a link or a file); move it away")
    state = _read_state(path)
    if path.exists() and (state is not None or any(path.iterdir())):
        foreign = _foreign(path) if state is not None else "resume.json"
        if foreign:
            raise OutputError(f"{where}: {path.name} beside it holds {echo(foreign)}, which causalab did not "
                              "write; move it away")
    if state is not None and pid_running(state["pid"]):
        raise OutputError(f"{where}: another causalab run (pid {state['pid']}) is writing it; if none is, "
                          f"remove {path.name}")
    if resume:
        if state is None:
            raise OutputError(f"{where}: nothing to resume (no interrupted run of it left {path.name})")
        differ = [_differs(key, state["identity"].get(key), value) for key, value in identity.items()
                  if state["identity"].get(key) != value]
        if differ:
            raise OutputError(f"{where}: --resume refused: the interrupted run came from another "
                              f"{', '.join(differ)}; run without --resume to start over")
        state["pid"] = os.getpid()
        try:
            _write_state(path, state)
        except OSError as exc:
            raise OutputError(f"{where}: cannot write in {path.name} beside it: {exc.strerror or exc}") from None
        return Store(path, state)
    made = [p for p in [path.parent, *path.parent.parents] if not p.exists()]
    state = {"written_by": MARK, "pid": os.getpid(), "identity": identity, "details": {}, "force": force}
    try:  # before any work: a disk too full to hold the store's first file is refused here
        if path.exists():
            remove(path)  # a dead run's store (or an empty folder): this run starts over
        path.mkdir(parents=True)
        (path / "points").mkdir()
        _write_state(path, state)
    except OSError as exc:
        try:
            Store(path, state, made).remove()
        except OSError:
            pass  # the line below says what went wrong; a store left half made is removed by the next run
        raise OutputError(f"{where}: cannot make {path.name} beside it (where completed points are kept): "
                          f"{exc.strerror or exc}") from None
    return Store(path, state, made)


def _differs(key: str, then: Any, now: Any) -> str:
    """``key``, and for a mapping (the run's distributions) which of its entries changed."""
    if not (isinstance(then, dict) and isinstance(now, dict)):
        return key
    changed = sorted(name for name in {*then, *now} if then.get(name) != now.get(name))
    return f"{key} ({', '.join(changed)} changed)"


def point_files(point: Any, files: dict[str, bytes]) -> dict[str, bytes]:
    """A point's own files out of a chunk's output files, by path inside the point's folder."""
    prefix = f"{point.name}/" if point.name else ""
    return {rel[len(prefix):]: data for rel, data in files.items()
            if rel.startswith(prefix) and rel not in ("document.json", "run.json")}


def ordered_files(plan: Any, store: Store, top: dict[str, bytes]) -> dict[str, bytes]:
    """The output folder's files, every point's from the store, in the order ``score.output_files`` lays them."""
    kept = {i: store.files(i) for i in range(len(plan.points))}
    prefixes = [f"{p.name}/" if p.name else "" for p in plan.points]
    files = dict(top)
    for i, point in enumerate(plan.points):
        for step in point.steps:
            if step.kind == "fit":
                name = f"{step.featurizer.name}.safetensors"
                files[prefixes[i] + name] = kept[i][name]
    for i, point in enumerate(plan.points):
        if point.name:
            files[f"{point.name}/document.json"] = kept[i]["document.json"]
    for i, point in enumerate(plan.points):
        for metric in point.metrics:
            files[f"{prefixes[i]}{metric.name}.json"] = kept[i][f"{metric.name}.json"]
    return files
