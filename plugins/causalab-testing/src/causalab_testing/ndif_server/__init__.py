"""A real NDIF server on loopback for the remote tests (the `[ndif-server]` extra of causalab-testing)."""
