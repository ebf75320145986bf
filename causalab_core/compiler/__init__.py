"""Document + weightless model shell -> plan: each sweep point's reads, writes, fits and scoring."""

from __future__ import annotations

from typing import Any

__all__ = ["compile_document", "load_shell", "resolve_source"]


def __getattr__(name: str) -> Any:
    # Lazily: the compiler loads torch and transformers, which what only reads documents never needs.
    if name == "compile_document":
        from causalab_core.compiler.compile import compile_document

        return compile_document
    if name in ("load_shell", "resolve_source"):
        from causalab_core.compiler import shell

        return getattr(shell, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
