"""Celery (or any task queue with retries): a task takes its turn from one limit shared by
every worker, in place of Celery's per-worker `rate_limit`. Celery is not imported here: the
task is any bound task with Celery's `retry(countdown=...)`."""

from .errors import RateLimited


def take_turn(task, client, max_wait=None, **limit):
    """Returns the Decision once the task may go ahead. When it may not yet, raises the task's
    retry with the server's retry time as countdown (`raise self.retry(...)` in Celery's
    words), so that the worker is free meanwhile; with `max_wait` (seconds) the worker first
    waits on the server (/v1/acquire) up to that long. A request that no wait can allow
    (its cost above the limit) raises RateLimited instead: retrying would never end.

        @app.task(bind=True, max_retries=None)
        def call_partner(self, order):
            sluice.take_turn(self, client, key="partner", algorithm="sliding_log", limit=5,
                             period="1s")
            ...
    """
    if max_wait is None:
        decision = client.check(**limit)
    else:
        decision = client.acquire(max_wait, **limit)
    if decision.allowed:
        return decision
    if decision.never:
        raise RateLimited(decision, getattr(task, "name", "task"))
    raise task.retry(countdown=decision.retry_after, max_retries=None)
