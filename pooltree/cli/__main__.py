"""``python -m pooltree.cli``: the same as the ``pooltree`` console script."""

from pooltree.cli import main

main()
