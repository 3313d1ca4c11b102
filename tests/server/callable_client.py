"""``python callable_client.py URL TOKEN PYTHON``: starts ``job_functions.square_to_stderr`` as a vanilla task
(2 jobs) through ``yt.wrapper`` and prints the operation id, as a user's script does.

A process of its own, not the test's: ``yt.wrapper`` packs every module the calling process has imported into
the archive the jobs unpack, and a pytest process holds hundreds (pooltree, the test server, hypothesis, ...).
From the test process the operation took 40-50 s of CPU-bound packing and unpacking at load average 9 (and shared
the interpreter lock with the in-process scheduler and node), several times the test's bound under heavier load;
from here it takes about 10 s.
"""

from __future__ import annotations

import sys

import yt.wrapper as ytw
from job_functions import square_to_stderr


def main(url: str, token: str, python: str) -> None:
    client = ytw.YtClient(
        proxy=url,
        token=token,
        config={
            "proxy": {"enable_proxy_discovery": False},
            # the modules archive goes up in pieces the server takes (a request body is at most 32 MiB decoded)
            "write_retries": {"chunk_size": 16 * 1024 * 1024},
            "write_parallel": {"enable": False},
            "pickling": {
                "python_binary": python,
                "enable_modules_compatibility_filter": True,
                "force_using_py_instead_of_pyc": True,
            },
        },
    )
    spec = ytw.VanillaSpecBuilder().begin_task("main").command(square_to_stderr).job_count(2).end_task()
    print(client.run_operation(spec, sync=False).id, flush=True)


if __name__ == "__main__":  # the jobs import this module again: only the operation's starter runs main
    main(*sys.argv[1:])
