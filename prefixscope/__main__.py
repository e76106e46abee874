"""`python -m prefixscope` runs the command line."""

from prefixscope.cli.main import main

main()
