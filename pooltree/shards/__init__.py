"""Node shards (issue 25): what parallel heartbeat processing is checked against (``recording.py``)."""
