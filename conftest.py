pytest_plugins = ["causalab_testing.fixtures"]
