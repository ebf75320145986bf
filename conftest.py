pytest_plugins = ["causalab_core.testing.fixtures"]
