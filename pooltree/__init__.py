"""pooltree: the YTsaurus scheduler model (hierarchical fair-share pool trees, vector HDRF, preemption,
memory digests) as a Python library, a simulator and a small real cluster."""

__version__ = "0.1.0"
