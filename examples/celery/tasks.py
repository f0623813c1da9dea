"""Celery tasks that call a partner's API under one quota shared by every worker: 5 calls per
second, whatever the number of workers and processes, in place of Celery's per-worker
`rate_limit` (which gives each worker its own 5/s).

    BROKER_URL=redis://127.0.0.1:6379/0 SLUICE_URL=http://127.0.0.1:8080 \\
    PARTNER_URL=http://127.0.0.1:9000 PYTHONPATH=../../clients/python \\
    celery -A tasks worker --concurrency 3

sliding_log is the algorithm that never admits more than its limit in any period (the others
allow up to twice that across a window's edge, or a burst): see docs/algorithms.md.
"""

import json
import os
import time
import urllib.request

from celery import Celery

import sluice

app = Celery("tasks", broker=os.environ.get("BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.task_ignore_result = True

# Opens its connection at the first call, so that each forked worker process has its own.
client = sluice.Client(os.environ.get("SLUICE_URL", "http://127.0.0.1:8080"), timeout=1.0,
                       on_error="deny")
PARTNER_LIMIT = dict(key="partner-api", algorithm="sliding_log", limit=5, period="1s")


@app.task(bind=True, max_retries=None)
def call_partner(self, order):
    """Asks once; when denied, the task is retried after the server's retry time and the
    worker takes other tasks meanwhile."""
    asked = time.time()
    sluice.take_turn(self, client, **PARTNER_LIMIT)
    return post_to_partner(order, asked)


@app.task(bind=True, max_retries=None)
def call_partner_waiting(self, order):
    """Waits on sluiced up to 2 s for its turn (holding the worker), then as call_partner."""
    asked = time.time()
    sluice.take_turn(self, client, max_wait=2, **PARTNER_LIMIT)
    return post_to_partner(order, asked)


def post_to_partner(order, asked):
    # `asked`, when the task asked sluiced, lets a test's fake partner bound when sluiced
    # admitted the call (between `asked` and the call's arrival): time.time() is the system
    # clock, the one sluiced decides by (include/sluice/clock.h), in every process.
    body = json.dumps({"order": order, "asked": asked, "pid": os.getpid()}).encode()
    url = os.environ.get("PARTNER_URL", "http://127.0.0.1:9000") + "/orders"
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status
