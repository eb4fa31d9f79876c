from tvmgen.cli import entry

entry()
