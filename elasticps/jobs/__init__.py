"""Launching a job and following it: ``elasticps.launch_job(job, ...) -> JobHandle``.

:mod:`elasticps.jobs.api` holds the interface (:class:`JobHandle`, :class:`JobResult`,
:func:`launch_job`); the backends are its siblings, imported when a job of theirs is launched:
``local_backend`` (``elasticps run`` in a child process) and ``cluster_backend``
(:func:`elasticps.cluster.submit.submit`, polled for its phase).
"""
