"""The read process (issue 25): a process of its own that owns the scheduler's client-facing API port, answers what
it can from a replica fed by the scheduler and relays everything else to the scheduler (``ARCHITECTURE.md``)."""
