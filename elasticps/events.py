"""What a trainer's event handler receives (``from elasticps.events import EndPass``):
``BeginPass``, ``EndIteration`` per batch, ``EndPass`` with the pass's metrics."""

from elasticps.trainer.events import BeginPass, EndIteration, EndPass, Event, EventHandler

__all__ = ["BeginPass", "EndIteration", "EndPass", "Event", "EventHandler"]
