"""Identity and permissions: users, groups, passwords and tokens, the node secret, ACL evaluation.

The API layer calls :class:`Security` once per request to authenticate and once per command to authorize; every
decision is made here (``acl.check`` is pure). See ARCHITECTURE.md in this folder.
"""

from pooltree.security.acl import Ace, AclNode, Decision, check, parse_acl
from pooltree.security.directory import Directory, SecurityError
from pooltree.security.guard import (
    NODE_SECRET_HEADER,
    SECURITY_ATTRIBUTES,
    ObjectResolver,
    OperationAccess,
    Security,
)

__all__ = [
    "NODE_SECRET_HEADER",
    "SECURITY_ATTRIBUTES",
    "Ace",
    "AclNode",
    "Decision",
    "Directory",
    "ObjectResolver",
    "OperationAccess",
    "Security",
    "SecurityError",
    "check",
    "parse_acl",
]
