"""One module per command (or group of commands); each reads top to bottom as the steps it takes.

compile, run (inspect, run), runtime (runtime build, embed), rpc (rpc *, devices), bench, tune,
partition, apps (app, rpc-app, doctor). `tvmgen.cli` holds the group and the error handling.
"""
