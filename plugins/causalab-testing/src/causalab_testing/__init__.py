"""Test support for causalab and its plugins: tiny models and conformance suites."""
