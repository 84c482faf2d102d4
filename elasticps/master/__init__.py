"""The master: the dataset's fault-tolerant task queue, its persistence, election and status page.

- :mod:`.task_queue`   the pure state machine (no I/O, no clock)
- :mod:`.snapshot`     persistence of the queue in the store, by parts
- :mod:`.service`      ``MasterState`` (queue + persistence under one lock) and the gRPC servicer
- :mod:`.leader`       the leader's life as a state machine; :mod:`.server` wires real servers
- :mod:`.status_page`  ``/api/status`` and the human page
- :mod:`.status_view` what the status document shows, stepped purely from what the master sees
- :mod:`.status_loop` the leader's loop that steps the view and saves ``job/history``
- :mod:`.client`       ``MasterClient`` for trainers (the loop that drives it is
                        :mod:`elasticps.trainer.task_loop`)
"""
