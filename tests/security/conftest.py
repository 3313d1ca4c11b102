"""Fixtures of the security tests: the server tests' ``serve`` (uvicorn on 127.0.0.1, stopped after the test)."""

from security_harness import serve

__all__ = ["serve"]
