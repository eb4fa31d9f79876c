from tvmgen.cli import main

main()
