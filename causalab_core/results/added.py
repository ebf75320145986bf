"""A file added to a finished run's folder later (a plot, a report), listed in its manifest, safe when cut short."""

from __future__ import annotations

import os
from pathlib import Path

from causalab_core.errors import OutputError, shorten
from causalab_core.results import folder as out
from causalab_core.results.manifest import MANIFEST, manifest_bytes, read_listing, sha256_of


def _replace(target: Path, content: bytes) -> None:
    """``target`` holds its old bytes or ``content``, never a mix: written beside it, then renamed over it."""
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        part.write_bytes(content)
        out._step(f"part {target.name}")
        part.replace(target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _settled(folder: Path, listed: dict[str, str], pending: dict[str, str]) -> dict[str, str]:
    """The files listed once what an add_file cut short announced is resolved: each holds what is on disk."""
    files = dict(listed)
    for rel, digest in pending.items():
        path = folder / rel
        if path.is_file() and not path.is_symlink() and sha256_of(path.read_bytes()) == digest:
            files[rel] = digest
    return files


def add_file(folder: Path, rel: str, data: bytes) -> Path:
    """Add (or replace) one file of a causalab output folder and list it in the manifest.

    Safe when cut short at any moment: the manifest announces the file before it is written, and only
    then lists it; the next add_file or run on the folder recognises and removes what was left.
    """
    try:
        return _add_file(folder, rel, data)
    except OSError as exc:
        raise OutputError(f"{shorten(str(folder / rel))}: cannot write it: {exc.strerror or exc}") from None


def _add_file(folder: Path, rel: str, data: bytes) -> Path:
    listing = read_listing(folder)
    if listing is None:
        raise OutputError(f"{shorten(str(folder))}: not a causalab output folder (no {MANIFEST})")
    for part in out.dead_parts(folder):
        part.unlink()
    listed = _settled(folder, *listing)
    path = out.inside(folder, rel)
    if path.exists() and (rel not in listed or sha256_of(path.read_bytes()) != listed[rel]):
        raise OutputError(f"{shorten(str(path))}: exists and was not written by causalab; move it away first")
    digest = sha256_of(data)
    _replace(folder / MANIFEST, manifest_bytes(listed, {rel: digest}))  # announced: either bytes are causalab's
    out._step("announced")
    try:
        _replace(path, data)
    except OSError:
        try:  # a full disk: take the announcement back, so the manifest names only what is there
            _replace(folder / MANIFEST, manifest_bytes(listed))
        except OSError:
            pass  # still announced only (never listed): readers skip it, the next add_file or run settles it
        raise
    out._step("file written")
    _replace(folder / MANIFEST, manifest_bytes({**listed, rel: digest}))
    return path
