"""The plugin machinery: hook specs, contracts, the registry, provenance and source digests.

What components meet (``contracts``), the hooks that hand them to core (``hookspecs``), their loading from
entry points (``registry``), and what pins them into a run (``provenance``, ``digests``). Nothing here imports
the stages above it.
"""
