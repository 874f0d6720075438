#!/usr/bin/env bash
# run_pytest.sh FLASHCHECK: python/tests/test_package.py under Debian's pytest with the plugin loaded
# by -p (an installed package loads it through its pytest11 entry point).
set -euo pipefail
export FLASHCHECK_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export PYTHONPATH=$(pwd)/python PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -p flashcheck.pytest_plugin -p no:cacheprovider --rootdir python python/tests/test_package.py
