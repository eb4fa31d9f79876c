"""Reports on runs: per-kernel profiles and memory."""
