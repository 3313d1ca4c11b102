"""Functions run as vanilla tasks by ``yt.wrapper`` in tests: a module with no imports of its own, so a job's
Python (the system one, not the test venv's) can unpickle them."""

from __future__ import annotations

import sys


def square_to_stderr() -> None:
    sys.stderr.write(f"callable ran: {7 * 7}\n")
