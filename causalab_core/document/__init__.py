"""Experiment documents: schema, loading, validation, JSON Schema export."""

from causalab_core.document.check import check_document
from causalab_core.document.load import LoadedDocument, load_document, parse_document
from causalab_core.document.schema import Document, SweepRef, json_schema

__all__ = ["Document", "LoadedDocument", "SweepRef", "check_document", "json_schema", "load_document", "parse_document"]
