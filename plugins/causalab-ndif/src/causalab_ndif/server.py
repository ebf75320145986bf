"""What the client can learn about an NDIF server before sending it work: its host, ``/env`` and ``/status``.

The host is nnsight's own setting (``NDIF_HOST``, or ``API.HOST`` in nnsight's
config file); causalab has none of its own.
"""

from __future__ import annotations

import functools
import json
import urllib.error
import urllib.request
from typing import Any

from causalab_core.errors import EngineError

TIMEOUT_S = 30


def resolved_host() -> str:
    """The host nnsight will send requests to, as a URL."""
    from nnsight import CONFIG

    host = CONFIG.API.HOST
    return host if "://" in host else f"https://{host}"


def get_json(host: str, path: str) -> Any:
    """GET ``host + path`` as JSON; an unreachable or failing server is one EngineError naming the host."""
    request = urllib.request.Request(host.rstrip("/") + path, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        raise EngineError(f"the NDIF server at {host} answered {path} with HTTP {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EngineError(f"cannot reach the NDIF server at {host}: {reason}") from None
    except ValueError:
        raise EngineError(f"the NDIF server at {host} answered {path} with something that is not JSON") from None


@functools.cache
def server_env(host: str) -> dict[str, Any]:
    """The server's ``/env`` (Python version and installed packages), asked once per host."""
    return get_json(host, "/env")


def served_models(host: str) -> dict[str, dict[str, Any]]:
    """Deployments the server runs now, by remote model key: ``{key: {"dtype", "state", "level"}}``."""
    status = get_json(host, "/status")
    served = {}
    for entry in status.get("deployments", {}).values():
        if entry.get("model_key") and entry.get("deployment_level") == "HOT":
            served[entry["model_key"]] = {"dtype": entry.get("dtype"), "state": entry.get("application_state")}
    return served


def server_record(host: str) -> dict[str, Any]:
    """run.json's ``server``: the host asked, and what its ``/env`` says of the watched packages."""
    from causalab_core.provenance import WATCHED

    try:
        env = server_env(host)
    except EngineError as exc:
        return {"asked": host, "answered": False, "error": str(exc)}
    packages = env.get("packages", {})
    return {
        "asked": host,
        "python": str(env.get("python_version", "")).split()[0],
        "versions": {name: packages.get(name) for name in WATCHED},
    }
