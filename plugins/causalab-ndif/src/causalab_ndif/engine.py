"""Engine ``ndif``: the nnterp engine's session, run on an NDIF server that already holds the weights."""

from __future__ import annotations

import contextlib
import sys

from pydantic import BaseModel, ConfigDict

from causalab_core.errors import EngineError
from causalab_nnterp import NnterpEngine

from causalab_ndif import preflight
from causalab_ndif.remote_errors import local_error
from causalab_ndif.server import resolved_host, served_models, server_env


class NdifOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    allow_skew: bool = False
    """Run even where the server's packages or causalab sources differ from this client's (recorded in run.json)."""


class NdifEngine(NnterpEngine):
    """Checks the server, sends the plan in one remote session, and brings home only the results."""

    name = "ndif"
    capabilities = frozenset({"remote", "heads", "training"})
    runs_remote = True
    Options = NdifOptions

    def model(self, plan):
        """The weightless shell the request is built from; it names the deployment by key and revision."""
        from causalab_nnterp import ServedTransformer

        return ServedTransformer(plan.model.source, key=plan.model.key, revision=plan.model.revision,
                                 dtype=plan.model.dtype)

    def run(self, plan, remote, batch_size, classes):
        """Check the server, send the session, and keep what it said about itself in ``details``."""
        from causalab_core.plugins import registry
        from causalab_core.provenance import causalab_digests, watched_versions

        host = remote if isinstance(remote, str) and "://" in remote else resolved_host()
        reg = registry()
        block = block_distributions(reg, classes)
        client = {name: d for name, d in causalab_digests(reg)["distributions"].items() if name in block}
        wanted = {**watched_versions(), **{name: d["version"] for name, d in client.items()}}
        skew = preflight.check(host, wanted, server_env(host).get("packages", {}), self.options.allow_skew)
        model = self.model(plan)
        shown = f"{plan.model.key}@{plan.model.revision}" if plan.model.revision else plan.model.key
        preflight.refuse_unserved(model.to_model_key(), served_models(host), host, shown)
        try:
            # nnsight prints the job's status lines on stdout; stdout is for what a run wrote.
            with contextlib.redirect_stdout(sys.stderr):
                results, served = run_remote(model, plan, batch_size, classes, host, client, self.options.allow_skew)
        except Exception as exc:  # what the server raised, or what stopped the request
            raise local_error(exc, host) from None
        self.details = {
            "host": host,
            "served_dtype": served["served_dtype"],
            "server_causalab": served["causalab"],
            "skew": {name: list(pair) for name, pair in {**skew, **served["skew"]}.items()},
        }
        return results


def block_distributions(registry, classes) -> set[str]:
    """The causalab distributions the block imports on the server, and so the only ones compared with it:
    core (the plan, the runtime), the distribution of the block's code (causalab-nnterp), and the providers
    of the featurizers the plan uses. Client-only plugins (metrics, positions, engines) never run there."""
    import causalab_nnterp

    owners = {p.module.__name__.split(".")[0]: p.distribution for p in registry.plugins}
    needed = {"causalab-core", owners[causalab_nnterp.__name__]}
    return needed | {registry.provider("featurizer", kind).distribution for kind in classes}


def run_remote(model, plan, batch_size, classes, host, client, allow_skew):
    """The remote session. It loads only its arguments and modules every causalab server installs."""
    import nnsight

    from causalab_core.plugins import installed_causalab
    from causalab_core.provenance import digest_skew
    from causalab_nnterp import run_plan

    with model.session(remote=host):
        installed = installed_causalab()
        skew = digest_skew(client, installed)
        if skew and not allow_skew:
            raise EngineError("the server's causalab sources differ from the client's: " + "; ".join(
                f"{name} (client {mine}, server {theirs})" for name, (mine, theirs) in sorted(skew.items())))
        served = nnsight.save({"served_dtype": str(model.lm_head.weight.dtype), "causalab": installed, "skew": skew})
        results = nnsight.save(run_plan(model, plan, batch_size, classes))
    return results, served
