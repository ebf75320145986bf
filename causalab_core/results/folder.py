"""The output folder: which --out may be written or replaced, and its atomic, recoverable swap.

A folder is causalab's when its ``manifest.json`` lists every file in it with
the sha256 causalab wrote; ``--force`` replaces only such a folder (or an
empty one). The new folder is written beside the old one and swapped in with
SIGINT/SIGTERM deferred; a run killed mid-swap leaves ``.NAME.replaced.PID``,
which the next run on that path puts back or removes. A folder causalab deletes
is marked first (``.causalab-removing``, deleted last), so a deletion cut short
is still recognised and finished by the next run. ``added.add_file`` announces a file
in the manifest (``pending``) before writing it through ``.NAME.PID.part``, so a
plot cut short leaves only what causalab recognises and cleans up.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from causalab_core.errors import OutputError, echo, shorten
from causalab_core.results.manifest import (
    MANIFEST, manifest_bytes, read_listing, read_manifest, sha256_of,
)

PARTIAL = ".causalab-partial"
"""Marks a folder causalab is still writing: only such a folder (or a causalab output) is ever cleaned up."""
REMOVING = ".causalab-removing"
"""Marks a folder causalab is deleting: removed last, so a deletion cut short is finished by the next run."""
NAME_LIMIT = 200
"""Longest --out name in bytes: the temporary sibling adds a pid and a suffix, and names stop at 255."""


def _step(name: str) -> None:
    """A named moment of the swap (tests inject interruptions here)."""


def _leftover(name: str) -> re.Pattern:
    """What an interrupted run on ``name`` leaves beside it: its unfinished or its replaced folder."""
    n = re.escape(name)
    return re.compile(rf"\.{n}\.(?:replaced\.(?P<old>\d+)|(?P<new>\d+)\.[^./]+\.tmp)")


_PART = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.part")
"""What ``add_file`` writes before renaming it over ``target``."""


def _is_causalabs(folder: Path) -> bool:
    """A folder causalab made: a finished output, one still being written or deleted, or an empty one it moved aside."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    return ((folder / PARTIAL).is_file() or (folder / REMOVING).is_file() or read_manifest(folder) is not None
            or not any(folder.iterdir()))


def remove(folder: Path) -> None:
    """Delete a folder causalab made, its mark last: cut short, it is still recognised, and finished next time."""
    if not folder.is_dir() or folder.is_symlink():
        return
    (folder / REMOVING).touch()
    for entry in folder.iterdir():
        if entry.name == REMOVING:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        _step(f"removed {entry.name}")
    (folder / REMOVING).unlink()
    folder.rmdir()


def dead_parts(folder: Path) -> list[Path]:
    """``add_file``'s part files in a causalab output that a process no longer running left behind."""
    listing = read_listing(folder)
    if listing is None:
        return []
    known = set(listing[0]) | set(listing[1]) | {MANIFEST}
    found = []
    for root, subdirs, names in os.walk(folder):
        subdirs[:] = [d for d in subdirs if not (Path(root) / d).is_symlink()]
        rel_root = Path(root).relative_to(folder)
        for name in names:
            part = _PART.fullmatch(name)
            path = Path(root) / name
            if part and str(rel_root / part["target"]) in known and not pid_running(int(part["pid"])) \
                    and path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def first_foreign(folder: Path) -> str | None:
    """The first path in ``folder`` (sorted) that causalab did not write there, or None.

    What causalab left there itself (a dead process's part files) is never counted.
    """
    listing = read_listing(folder)
    if listing is None:
        entries = sorted(p.name for p in folder.iterdir())
        return f"{entries[0]} (the folder has no causalab {MANIFEST})" if entries else None
    listed, pending = listing
    leftovers = set(dead_parts(folder))
    dirs = {str(p) for rel in [*listed, *pending] for p in Path(rel).parents} | {"."}
    for root, subdirs, names in os.walk(folder):
        subdirs.sort()
        rel_root = Path(root).relative_to(folder)
        if str(rel_root) == "." and MANIFEST in names:
            names.remove(MANIFEST)
        for sub in list(subdirs):
            rel = rel_root / sub
            if (Path(root) / sub).is_symlink() or str(rel) not in dirs:
                return f"{rel}/"
        for name in sorted(names):
            rel = str(rel_root / name)
            path = Path(root) / name
            if path in leftovers:
                continue
            if path.is_symlink() or not path.is_file() or (rel not in listed and rel not in pending):
                return rel  # a FIFO is never read
            if sha256_of(path.read_bytes()) not in (listed.get(rel), pending.get(rel)):
                return f"{rel} (changed since causalab wrote it)"
    return None


def pid_running(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process: any leftover of ours is from a run that already ended
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(out: Path) -> None:
    """Put back a folder an interrupted swap moved aside; remove what interrupted runs left."""
    parent, pattern = out.parent, _leftover(out.name)
    if not parent.is_dir():
        return
    for entry in sorted(parent.iterdir()):
        found = pattern.fullmatch(entry.name)
        if not found or pid_running(int(found["old"] or found["new"])) or not _is_causalabs(entry):
            continue
        if found["old"] and not (entry / REMOVING).exists() and not out.exists() and not out.is_symlink():
            entry.rename(out)
        else:
            remove(entry)
    if out.is_dir() and not out.is_symlink():
        if mount_point(out):
            _recover_in_place(out)
        for part in dead_parts(out):
            part.unlink()


def _protected(out: Path, protected: Iterable[Path]) -> str | None:
    """Why ``out`` must never be replaced, or None."""
    cwd, home = Path.cwd().resolve(), Path.home().resolve()
    if out == Path(out.anchor):
        return "is the filesystem root"
    if out == cwd or out in cwd.parents:
        return "is the current folder or one above it"
    if out == home or out in home.parents:
        return "is the home folder or one above it"
    for path in protected:
        held = path.resolve()
        if out == held or out in held.parents:
            return f"holds {shorten(str(path))}, which this run reads"
    return None


def check_out(out: Path, *, force: bool, protected: Iterable[Path] = ()) -> None:
    """Refuse, before any work, an --out that cannot be written or must not be replaced."""
    where = f"--out {shorten(str(out))}"
    try:
        _check_out(out, where, force, protected)
    except OSError as exc:  # a name too long, a path the system refuses: one line, never a traceback
        raise OutputError(f"{where}: {exc.strerror or exc}") from None


def _check_out(out: Path, where: str, force: bool, protected: Iterable[Path]) -> None:
    if out.is_symlink() or Path(os.path.normpath(out.absolute())).is_symlink():
        raise OutputError(f"{where}: is a symbolic link; give the folder itself")
    resolved = out.resolve()
    if len(resolved.name.encode()) > NAME_LIMIT:
        raise OutputError(f"{where}: the folder name is longer than {NAME_LIMIT} bytes")
    why = _protected(resolved, protected)
    if why:
        raise OutputError(f"{where}: {why}; causalab never writes there")
    ancestor = resolved.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"{where}: {ancestor} is not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".causalab-probe.", dir=ancestor))
    except OSError as exc:
        raise OutputError(f"{where}: cannot write in {ancestor}: {exc.strerror or exc}") from None
    recover(resolved)
    if resolved.exists() and not resolved.is_dir():
        raise OutputError(f"{where}: exists and is not a folder")
    if resolved.is_dir() and mount_point(resolved):  # written in place: it must take files itself
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".causalab-probe.", dir=resolved))
        except OSError as exc:
            raise OutputError(f"{where}: cannot write in it: {exc.strerror or exc}") from None
    if resolved.is_dir() and any(resolved.iterdir()):
        if not force:
            raise OutputError(f"{where}: folder exists and is not empty (--force replaces a previous causalab output)")
        foreign = first_foreign(resolved)
        if foreign:
            raise OutputError(f"{where}: --force replaces only a previous causalab output, and it holds "
                              f"{shorten(foreign)}, which causalab did not write")


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then act as they would have.

    Python runs signal handlers in the main thread whichever thread the kernel delivered to, so the
    handlers are swapped for ones that only note the signal (blocking it in the main thread is not enough:
    the kernel then hands a process-directed signal to another thread, torch's workers among them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    swapped = {sig: handler for sig, handler in previous.items() if handler is not None}  # None: not Python's
    for sig in swapped:
        signal.signal(sig, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in swapped.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


def inside(folder: Path, rel: str) -> Path:
    path = (folder / rel).resolve()
    if Path(rel).is_absolute() or ".." in Path(rel).parts or folder.resolve() not in path.parents:
        raise OutputError(f"refusing to write {echo(rel)}: it is not inside the output folder")
    return path


def write_folder(out: Path, files: dict[str, bytes], force: bool, protected: Iterable[Path] = ()) -> None:
    """Write beside ``out``, then swap it in: the path holds the old folder or the new one, never neither.
    A folder that cannot be renamed (a mount point) is written in place instead (``_write_in_place``)."""
    check_out(out, force=force, protected=protected)  # again: the folder may have changed while the plan ran
    resolved = out.resolve()
    try:
        if resolved.is_dir() and mount_point(resolved):
            _write_in_place(resolved, files)
        else:
            _write_folder(resolved, files)
    except OSError as exc:  # a disk that fills, a second run racing on the same path
        kept = resolved.with_name(f".{resolved.name}.resume")
        hint = f"; the points computed are kept in {kept.name}: run again with --resume" if kept.is_dir() else ""
        raise OutputError(f"--out {shorten(str(out))}: cannot write it: {exc.strerror or exc}{hint}") from None


def _unescaped(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (a space as \\040) back to itself."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def mount_point(folder: Path) -> bool:
    """Whether ``folder`` is a mount point (a bind mount too): a folder the system will not rename."""
    if os.path.ismount(folder):
        return True
    try:
        table = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    target = str(folder.resolve())
    return any(len(f) > 4 and _unescaped(f[4]) == target for f in (line.split(" ") for line in table.splitlines()))


STAGED = ".causalab-staged."
"""Inside a folder written in place: ``.causalab-staged.PID``, the new files before they are moved up."""


def _write_in_place(out: Path, files: dict[str, bytes]) -> None:
    """Write a folder that cannot be swapped (a mount point) in place.

    The files are staged in a hidden folder inside it first, so a disk that fills leaves the old content
    as it was; then, with SIGINT and SIGTERM deferred, the folder is marked partial, the old files go,
    the new ones are moved up (renames in one filesystem), the manifest last, and the mark is removed.
    Killed in those moments, the folder keeps its mark and the next run on it clears it."""
    stage = out / f"{STAGED}{os.getpid()}"
    stage.mkdir()
    try:
        (stage / PARTIAL).write_text(str(os.getpid()))
        for rel, data in files.items():
            path = inside(stage, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (stage / MANIFEST).write_bytes(manifest_bytes({rel: sha256_of(data) for rel, data in files.items()}))
        _step("written")
        with signals_deferred():
            (out / PARTIAL).write_text(str(os.getpid()))  # from here on the folder is causalab's, half written
            for entry in out.iterdir():
                if entry.name not in (stage.name, PARTIAL):
                    _delete(entry)
            _step("old removed")
            for entry in sorted(stage.iterdir(), key=lambda p: p.name == MANIFEST):  # the manifest last
                if entry.name != PARTIAL:
                    entry.rename(out / entry.name)
            (stage / PARTIAL).unlink()
            stage.rmdir()
            (out / PARTIAL).unlink()
        _step("swapped")
    except BaseException:
        if stage.exists():
            _clear(stage)
            stage.rmdir()
        raise


def _clear(folder: Path) -> None:
    """Empty a folder causalab wrote, keeping the folder itself (a mount point cannot be removed)."""
    for entry in folder.iterdir():
        _delete(entry)


def _delete(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _recover_in_place(out: Path) -> None:
    """Clear what a run killed while writing ``out`` in place left: its staged files, or a half-written folder."""
    for stage in out.glob(f"{STAGED}*"):
        pid = stage.name[len(STAGED):]
        if pid.isdigit() and not pid_running(int(pid)) and stage.is_dir() and not stage.is_symlink() \
                and (stage / PARTIAL).is_file():
            _clear(stage)
            stage.rmdir()
    mark = out / PARTIAL
    if mark.is_file() and not mark.is_symlink():
        pid = mark.read_text().strip()
        if pid.isdigit() and not pid_running(int(pid)):
            _clear(out)


def _folder_mode(out: Path) -> int:
    """The mode the new folder gets: the old folder's where there is one, else what the umask allows."""
    if out.is_dir():
        return out.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def _write_folder(out: Path, files: dict[str, bytes]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}.", suffix=".tmp", dir=out.parent))
    old = out.with_name(f".{out.name}.replaced.{os.getpid()}")
    try:
        (tmp / PARTIAL).touch()
        for rel, data in files.items():
            path = inside(tmp, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (tmp / MANIFEST).write_bytes(manifest_bytes({rel: sha256_of(data) for rel, data in files.items()}))
        (tmp / PARTIAL).unlink()  # from here on the manifest says whose folder this is
        os.chmod(tmp, _folder_mode(out))
        _step("written")
        with signals_deferred():
            moved = out.exists()
            if moved:
                out.rename(old)
            try:
                _step("old moved aside")
                tmp.rename(out)
            except BaseException:
                if moved:
                    old.rename(out)
                raise
            if moved:
                (old / REMOVING).touch()  # from here on, whatever stops the deletion, the next run finishes it
        _step("swapped")
        if moved:
            remove(old)
    except BaseException:
        remove(tmp)  # marked before anything goes: a second signal here leaves what the next run removes
        raise
