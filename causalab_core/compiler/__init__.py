"""Document + weightless model shell -> plan; sweeps expand here."""

from causalab_core.compiler.compile import compile_document
from causalab_core.compiler.shell import load_shell, resolve_source

__all__ = ["compile_document", "load_shell", "resolve_source"]
