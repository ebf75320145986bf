"""The plugin machinery: hook specs, the contracts components meet, the registry that loads them from entry
points, and what pins them into a run (provenance, source digests). Nothing here imports the stages above."""
