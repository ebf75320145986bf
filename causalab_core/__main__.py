"""`python -m causalab_core`: the causalab command line."""

from causalab_core.cli import main

main()
