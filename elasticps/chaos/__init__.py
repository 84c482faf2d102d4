"""``elasticps chaos``: prove that a training job survives SIGKILLs of every role.

Top to bottom:

    cli.py         the command line: ``elasticps chaos [options] SCRIPT [ARGS...]``
    run.py         from start to report: the fault-free run, the run under faults, accounting
    loop.py        the faults, one step at a time (a gap, then a kill or a scale step), measured
    job.py         the user's script under ``elasticps run``: started, waited for, stopped
    job_watch.py   chaos's watch of the running job: its store records and its master's
                   ``/api/status``
    plan.py        the seeded schedule: gaps, kill-or-scale steps, picks (pure)
    targets.py     which processes may be killed, and when a role serves again, decided from the
                   job's own store records (pure)
    report.py      the report and the reasons to exit non-zero (pure)
    accounting.py  exactly-once accounting of a finished job, from durable state
    options.py     the validated options of one invocation

Processes are found only through what the job publishes (``elasticps.store.keys``), never
through the machine's process table or log files, and only pids published for this host are
ever signalled.
"""
