"""Conformance suites a plugin package runs against its own components.

Suites: ``MetricConformance``, ``FeaturizerConformance``, ``PositionResolverConformance``,
``CausalModelConformance``, ``EngineConformance``, ``InterventionConformance``. Subclass the suite in your plugin's
tests and override its fixtures (each raises until overridden), as fsspec's abstract filesystem tests work::

    from causalab_testing.conformance import MetricConformance

    class TestBrier(MetricConformance):
        @pytest.fixture
        def metric(self):
            return Brier()

        @pytest.fixture
        def params(self):
            return Brier.Params(answer="gold")

One module per suite (``metrics``, ``featurizers``, ``positions``, ``causal_models``, ``engines``,
``interventions``), with what they share apart: ``common`` (fixtures to override, strict parameters),
``reference`` (the independent forwards engines are held to) and ``kit`` (the kit's own intervention kinds).
"""

from causalab_testing.conformance.causal_models import CausalModelConformance
from causalab_testing.conformance.engines import EngineConformance
from causalab_testing.conformance.featurizers import FeaturizerConformance
from causalab_testing.conformance.interventions import InterventionConformance
from causalab_testing.conformance.metrics import MetricConformance, metric_inputs
from causalab_testing.conformance.positions import PositionResolverConformance
from causalab_testing.conformance.reference import independent_forward, ragged_rows

__all__ = [
    "CausalModelConformance", "EngineConformance", "FeaturizerConformance", "InterventionConformance",
    "MetricConformance", "PositionResolverConformance", "independent_forward", "metric_inputs", "ragged_rows",
]
