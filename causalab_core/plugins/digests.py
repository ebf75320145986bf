"""Source digests: sha256 over a distribution's files, named by their paths inside the package, however installed.

A client set up editable and a server installed from wheels must agree when
their files are the same bytes: so the digest reads the files of the package
the import system found (a wheel's folder in site-packages, an editable
tree, an import-hook install's target, a plain checkout on ``sys.path``) and
names each one from the package folder down (``causalab_core/api.py``), never
by how an installer recorded it. Bytecode and ``__pycache__`` are left out.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import sys
from pathlib import Path
from types import ModuleType


def source_digest(package_dir: Path) -> str:
    """sha256 over every file under a package directory, package data included (its path from the package
    folder, e.g. ``causalab_core/api.py``, and its bytes)."""
    return _digest(_tree(Path(package_dir)))


def distribution_digest(distribution: str, module: ModuleType | None = None) -> str:
    """sha256 over the files of the top-level package (or single module) ``module`` belongs to, as imported:
    the same files give the same digest whether they came from a wheel, an editable install or a checkout.
    Without a module, the distribution's installed files as its RECORD lists them (the same names)."""
    if module is not None and getattr(module, "__file__", None):
        top = sys.modules.get(module.__name__.split(".")[0], module)
        path = Path(top.__file__ or module.__file__)
        if path.name == "__init__.py":
            return _digest(_tree(path.parent))
        return _digest([(path.name, path)])  # a single-module plugin: that module, whatever shares its folder
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
    own = [f for f in files if not (f.parts[0].endswith((".dist-info", ".data")) or f.parts[0] == ".."
                                    or f.parts[0].startswith(("__editable__", "_editable_impl_"))  # an import hook
                                    or "__pycache__" in f.parts or f.suffix in (".pyc", ".pth"))]
    return _digest((f.as_posix(), f.locate()) for f in own) if own else "unknown"


def package_dir(module: ModuleType) -> Path:
    """The directory of the top-level package a module belongs to."""
    top = sys.modules[module.__name__.split(".")[0]]
    return Path(top.__file__).parent


def _tree(folder: Path) -> list[tuple[str, Path]]:
    return [(path.relative_to(folder.parent).as_posix(), path) for path in folder.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"]


def _digest(files) -> str:
    """Over (name, file) pairs in name order: the order a folder or a RECORD lists them in does not count."""
    h = hashlib.sha256()
    for name, path in sorted(files, key=lambda pair: pair[0]):
        h.update(name.encode() + b"\0")
        h.update(Path(path).read_bytes() + b"\0")
    return h.hexdigest()
