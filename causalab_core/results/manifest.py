"""A run's manifest, and reading a run back as it lists it.

``manifest.json`` names every file causalab wrote in an output folder with its sha256 (and, while
``add_file`` writes one, the bytes it may hold instead: ``pending``). Whatever reads a finished run reads it
here: only what the manifest lists, each file checked against its digest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from causalab_core.errors import OutputError, echo

MANIFEST = "manifest.json"
MARK = "causalab output"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(digests: dict[str, str], pending: dict[str, str] | None = None) -> bytes:
    listing = {"written_by": MARK, "files": dict(sorted(digests.items()))}
    if pending:  # files add_file is writing: each may hold its listed bytes or these
        listing["pending"] = dict(sorted(pending.items()))
    return (json.dumps(listing, indent=1) + "\n").encode()


def read_listing(folder: Path) -> tuple[dict[str, str], dict[str, str]] | None:
    """The files a causalab manifest lists, and those it announces (``pending``); None for no manifest."""
    path = folder / MANIFEST
    try:
        if not path.is_file() or path.is_symlink():
            return None
        listing = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(listing, dict) or listing.get("written_by") != MARK or not isinstance(listing.get("files"), dict):
        return None
    pending = listing.get("pending", {})
    return listing["files"], pending if isinstance(pending, dict) else {}


def read_manifest(folder: Path) -> dict[str, str] | None:
    listing = read_listing(folder)
    return None if listing is None else listing[0]


UNTRUSTED = "the run's numbers cannot be read from it"


def read_run(folder: Path) -> dict[str, bytes]:
    """Every file a finished run's manifest lists, by path, each checked against its sha256 there.

    What every reader of a run (``load``, ``table``, ``compare``, ``plot``) reads, and all it reads: a file
    changed or removed since causalab wrote it is refused in one line, and a file the manifest does not
    list is never read as the run's."""
    listing = read_listing(folder)
    if listing is None:
        raise OutputError(f"{echo(str(folder))} is not a causalab output folder (no {MANIFEST} of causalab's)")
    listed, pending = listing
    files = {}
    for rel, digest in sorted(listed.items()):
        files[rel] = vouched(folder, rel, {digest, pending.get(rel)})
    return files


def vouched(folder: Path, rel: str, digests: set[str | None]) -> bytes:
    """The bytes of ``folder/rel`` where their sha256 is one of ``digests``; else one line saying why not."""
    path = folder / rel
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise OutputError(f"{echo(str(folder / MANIFEST))} lists {echo(rel)}, outside the folder; {UNTRUSTED}")
    try:
        if path.is_symlink() or (path.exists() and not path.is_file()):  # a link or a FIFO is never read
            raise OutputError(f"{echo(str(path))} changed since causalab wrote it; {UNTRUSTED}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise OutputError(f"{echo(str(path))} is missing; {UNTRUSTED}") from None
    except OSError as exc:
        raise OutputError(f"{echo(str(path))} cannot be read: {exc.strerror or exc}") from None
    if sha256_of(data) not in digests:
        raise OutputError(f"{echo(str(path))} changed since causalab wrote it; {UNTRUSTED}")
    return data


def vouched_file(path: Path) -> bytes:
    """A file's bytes, checked against the manifest of the causalab output folder it lies in, if any (a
    featurizer file a document loads from a previous run): a file copied out of any run is read as it is."""
    resolved = path.resolve()
    for folder in resolved.parents:
        listing = read_listing(folder)
        if listing is None:
            continue
        rel = str(resolved.relative_to(folder))
        if rel not in listing[0]:
            raise OutputError(f"{echo(str(path))} is not listed in the {MANIFEST} of the causalab output it "
                              f"lies in; {UNTRUSTED}")
        return vouched(folder, rel, {listing[0][rel]})
    return path.read_bytes()  # an OSError is the caller's to name
