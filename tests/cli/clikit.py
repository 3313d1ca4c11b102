"""Runs ``pooltree fair-share`` as a real subprocess for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_fair_share(*args: str, wide_console: bool = True) -> subprocess.CompletedProcess[str]:
    """``python -m pooltree.cli fair-share ARGS`` from the repo root, bounded in time.

    ``wide_console``: COLUMNS=250; False runs without COLUMNS, as output piped from a shell would.
    """
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    if wide_console:
        env["COLUMNS"] = "250"
    return subprocess.run(
        [sys.executable, "-m", "pooltree.cli", "fair-share", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
