from prefixscope.cli.main import main

main()
