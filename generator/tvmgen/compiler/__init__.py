"""Compiler: platform/device table, TVM build, export, artifact writing."""
