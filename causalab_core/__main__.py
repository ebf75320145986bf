from causalab_core.cli import main

main()
