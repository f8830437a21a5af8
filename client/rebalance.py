"""Compatibility names: allocation moved to client.allocate, per-queue bookkeeping to client.process_queue."""

from client.allocate import allocate_averagely, allocate_averagely_by_circle, sort_queues
from client.process_queue import ProcessQueue

__all__ = ["ProcessQueue", "allocate_averagely", "allocate_averagely_by_circle", "sort_queues"]
