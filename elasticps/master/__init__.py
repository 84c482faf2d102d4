"""The master: the dataset's fault-tolerant task queue, its persistence, election and status page.

- :mod:`.task_queue`   the pure state machine (no I/O, no clock)
- :mod:`.snapshot`     persistence of the queue in the store, by parts
- :mod:`.service`      the gRPC servicer and the leader loop
- :mod:`.http_status`  ``/api/status`` and the human page
- :mod:`.client`       ``MasterClient`` for trainers (the loop that drives it is
                        :mod:`elasticps.trainer.task_loop`)
"""
