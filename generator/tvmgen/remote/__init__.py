"""Remote runs over TVM RPC: the servers (tracker, proxy, native device server) and bench."""
