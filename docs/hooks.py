"""mkdocs hooks for the reference site: the document fields as tables generated from the schema, and the
checks that make a missing description or docstring fail a strict build (each is a warning)."""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any

log = logging.getLogger("mkdocs.hooks.causalab")
FIELDS = "<!-- causalab: document fields -->"


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return f"[{prop['$ref'].rsplit('/', 1)[-1]}](#{prop['$ref'].rsplit('/', 1)[-1].lower()})"
    if "enum" in prop:
        return " \\| ".join(f"`{v!r}`".replace("'", '"') for v in prop["enum"])
    if "const" in prop:
        return f"`\"{prop['const']}\"`"
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object" and "additionalProperties" in prop and isinstance(prop["additionalProperties"], dict):
        return f"object of {_type(prop['additionalProperties'])}"
    return str(kind)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def missing_descriptions(schema: dict[str, Any]) -> list[str]:
    """``Model.field`` for every field of the document schema (and its models) without a description."""
    models = {"Document": schema, **schema.get("$defs", {})}
    return [f"{name}.{field}" for name, model in models.items()
            for field, prop in model.get("properties", {}).items() if not prop.get("description")]


def field_tables(schema: dict[str, Any]) -> str:
    """Markdown: the document's fields, then each model's, a table each (field, type, default, description)."""
    models = {"Document": schema, **dict(sorted(schema.get("$defs", {}).items()))}
    parts = []
    for name, model in models.items():
        if "properties" not in model:
            continue
        required = set(model.get("required", []))
        extra = " Other keys are the component's own parameters." if model.get("additionalProperties") is True else ""
        parts.append(f"### {name}\n\n{_cell(model.get('description', ''))}{extra}\n\n"
                     "| field | type | default | description |\n|---|---|---|---|")
        for field, prop in model["properties"].items():
            default = "required" if field in required else f"`{_cell(json.dumps(prop.get('default')))}`"
            parts.append(f"| `{field}` | {_cell(_type(prop))} | {default} | {_cell(prop.get('description', ''))} |")
        parts.append("")
    return "\n".join(parts)


def public_without_docstrings() -> list[str]:
    """Every public name of the Python API, the hook specs and the plugin contracts without a docstring."""
    import causalab_core
    from causalab_core import api
    from causalab_core.plugins import contracts, hookspecs

    found = []
    objects = [(f"causalab_core.{n}", getattr(causalab_core, n)) for n in causalab_core.__all__]
    objects += [(f"causalab_core.api.{n}", getattr(api, n)) for n in ("run", "plan", "validate", "RunResult")]
    objects += [(f"hookspecs.{n}", f) for n, f in vars(hookspecs).items() if n.startswith("causalab_")]
    objects += [(f"contracts.{n}", c) for n, c in vars(contracts).items()
                if inspect.isclass(c) and c.__module__ == contracts.__name__ and not n.startswith("_")]
    for name, obj in objects:
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not (obj.__doc__ or "").strip():
            found.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("causalab_core"):
            for member, value in vars(obj).items():
                if member.startswith("_") or not (inspect.isfunction(value) or isinstance(value, property)):
                    continue
                if not ((value.fget if isinstance(value, property) else value).__doc__ or "").strip():
                    found.append(f"{name}.{member}")
    return found


def on_pre_build(config: Any) -> None:
    from causalab_core.document.schema import json_schema

    for field in missing_descriptions(json_schema()):
        log.warning(f"the document field {field} has no description")
    for name in public_without_docstrings():
        log.warning(f"{name} has no docstring")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if FIELDS in markdown:
        from causalab_core.document.schema import json_schema

        markdown = markdown.replace(FIELDS, field_tables(json_schema()))
    return markdown
