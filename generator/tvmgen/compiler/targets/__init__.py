"""Where a model runs: the platform and device tables and the TVM targets they make (platforms), the
files each platform's toolchain writes (export), and the tuning database a target's build reads (database)."""
