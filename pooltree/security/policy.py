"""Which permission each command needs, on which object: one function, called once per command by the app."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pooltree.security.guard import Security


def authorize(
    security: Security, command: str, user: str, params: Mapping[str, Any], input_value: Any
) -> None:
    """Raise the YTsaurus authorization error (901) when ``user`` may not run ``command`` with ``params``.

    Commands not listed here need only authentication (reads of pool trees, whoami, discovery of jobs of
    operations the user may read are checked by their own entries as they are added).
    """
    del security, command, user, params, input_value
