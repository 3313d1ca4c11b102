"""What the live cluster's commands (``pooltree scheduler``, ``node``, ``local``) share: the default data
directory, their log format, and a clean stop on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

DEFAULT_DATA = Path(".pooltree")
DEBUG_LOGGERS = "POOLTREE_DEBUG_LOGGERS"
"""Environment variable: comma-separated loggers that log at DEBUG (e.g. ``pooltree.forecast``: each forecast
refresh's phases, which ``bench/forecast_live.py`` reads); every other logger logs at INFO."""


def setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    for name in os.environ.get(DEBUG_LOGGERS, "").split(","):
        if name.strip():
            logging.getLogger(name.strip()).setLevel(logging.DEBUG)


def install_stop_handlers(stop: asyncio.Event) -> None:
    """SIGINT and SIGTERM set ``stop`` (a clean shutdown instead of a traceback)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
