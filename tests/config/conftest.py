"""Config tests build the seeds' pool trees with the same helper as the tree runtime tests.

The one helper module is ``tests/tree/treekit.py``; this puts its folder on ``sys.path`` so ``import treekit``
works whichever test folders pytest collects.
"""

from __future__ import annotations

import sys
from pathlib import Path

TREEKIT_DIR = str(Path(__file__).resolve().parents[1] / "tree")
if TREEKIT_DIR not in sys.path:
    sys.path.insert(0, TREEKIT_DIR)
