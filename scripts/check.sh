#!/usr/bin/env bash
# The checks besides the tests (CI runs them before pytest; the pre-commit hooks run the first four):
# lint, formatting, types, the package's layers (no import cycles), and the docs site built strictly.
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv/bin
echo "check: ruff (lint)";            $V/ruff check generator tests benchmarks scripts
echo "check: ruff (format)";          $V/ruff format --check generator tests benchmarks scripts
echo "check: mypy (types)";           $V/python -m mypy
echo "check: import-linter (layers)"; (cd generator && ../$V/lint-imports --no-cache ../pyproject.toml)
echo "check: mkdocs (docs, strict)";  site=$(mktemp -d); NO_MKDOCS_2_WARNING=1 $V/mkdocs build --strict -q -d "$site"; rm -rf "$site"
echo "check: all passed"
