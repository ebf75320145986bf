"""A real NDIF server on loopback for the remote tests (the `[testserver]` extra)."""
