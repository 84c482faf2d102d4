"""What a job shows of itself: Prometheus metrics (an exporter per process, its address
published in the store), log lines naming job, role and node, and the status page's assets.

Each role defines its own metrics next to its code (``master/telemetry.py``,
``pserver/telemetry.py``, ``trainer/telemetry.py``); this package holds what they share.
"""
