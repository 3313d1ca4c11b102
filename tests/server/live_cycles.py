"""The live paths' reference cycles (``tests/server/test_gc_tuning.py``'s
``test_the_live_paths_leave_no_cycles_for_the_policy_to_freeze``), run in a process of its own so that no other
test's thread makes garbage while the collector is off: ``python tests/server/live_cycles.py DIR`` prints one JSON
object, the objects one collection found unreachable after the rounds and their most common types."""

from __future__ import annotations

import gc
import http.client
import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent.parent)]

from published_cluster import SPEC, heartbeat, published_service, serving  # noqa: E402

LIVE_READS = (
    ("/api/v4/get_operation", "operation_id={operation}"),
    ("/api/v4/get_operation", "operation_id=0-0-0-0"),
    ("/api/v4/list_operations", "limit=5"),
    ("/api/v4/list_jobs", "operation_id={operation}"),
    ("/api/v4/get", "path=//sys/scheduler/orchid/scheduler/pool_trees/default"),
    ("/api/v4/get", "path=//sys/scheduler/orchid/scheduler/operations/{operation}"),
    ("/", ""),
    ("/", "page=scheduling&tree=default"),
    ("/operations", ""),
    ("/nodes", ""),
    ("/metrics", ""),
)
"""What the live-paths test reads over HTTP each round (``{operation}``: the round's started operation): the API's
reads (an unknown operation: an error's path), the orchid, the web pages a browser refreshes (the Scheduling page
whole and as its htmx fragment) and ``/metrics``. Not the History page and the charts: Plotly's figure objects
point at each other, nor a page's pretty-printed spec (the standard library's Python JSON encoder, which
``indent`` selects, leaves three closures in a cycle): those are made inside ``GcPolicy.unfrozen`` blocks, so that
no collection freezes them alive (``tests/web/test_web_pages.py``)."""


def live_cycles(tmp_path: Path, rounds: int = 6) -> tuple[int, Counter[str]]:
    """Heartbeats, starts, fair-share updates, read snapshots' publications and ``LIVE_READS`` over real HTTP, for
    ``rounds`` rounds with everything alive before frozen and the collector off; then one collection with
    ``DEBUG_SAVEALL``: the objects it found unreachable (every reference cycle the rounds made and dropped) and
    their types. The client is ``http.client``, whose requests and answers make no cycle of their own."""
    now = [1000.0]
    service = published_service(tmp_path, now, authentication=False)
    scheduler = service.scheduler
    with serving(service) as url:
        client = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=30)

        def read(path: str, query: str) -> int:
            client.request("GET", f"{path}?{query}" if query else path)
            answer = client.getresponse()
            answer.read()
            return answer.status

        try:
            started = scheduler.start_operation("vanilla", SPEC, "root", now[0])
            for path, query in LIVE_READS:  # the server's first-use objects made
                assert read(path, query.format(operation=started.id)) in (200, 400), path
            gc.collect()
            gc.freeze()
            gc.disable()
            try:
                for _ in range(rounds):
                    now[0] += 0.5
                    heartbeat(service, "n1", now[0])
                    started = scheduler.start_operation("vanilla", SPEC, "root", now[0])
                    scheduler.update_fair_share("default", now[0])
                    scheduler.snapshots.publish()
                    for path, query in LIVE_READS:
                        assert read(path, query.format(operation=started.id)) in (200, 400), path
                gc.set_debug(gc.DEBUG_SAVEALL)
                found = gc.collect()
                kinds = Counter(type(garbage).__qualname__ for garbage in gc.garbage)
            finally:
                gc.garbage.clear()
                gc.set_debug(0)
                gc.unfreeze()
                gc.enable()
        finally:
            client.close()
    return found, kinds


if __name__ == "__main__":
    found, kinds = live_cycles(Path(sys.argv[1]))
    print(json.dumps({"found": found, "kinds": kinds.most_common(10)}))
