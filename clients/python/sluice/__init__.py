"""sluice: the client of sluiced, the sluice rate limit server (docs/python.md).

    import sluice
    client = sluice.Client("http://127.0.0.1:8080", timeout=1.0, on_error="deny")
    decision = client.check(key="alice", algorithm="gcra", limit=10, period="1s")
    if not decision.allowed:
        time.sleep(decision.retry_after)
"""

from . import adapters
from .aio import AsyncClient
from .client import Client
from .decision import Decision, Limit, SettledLimit, Settlement
from .decorator import limited
from .errors import BadRequest, Forbidden, RateLimited, SluiceError, UnmatchedWarning
from .lease import Lease
from .metered import Meter
from .partner import Feedback, FeedbackLimit
from .tasks import take_turn

__all__ = ["AsyncClient", "BadRequest", "Client", "Decision", "Feedback", "FeedbackLimit",
           "Forbidden", "Lease", "Limit",
           "Meter", "RateLimited", "adapters", "SettledLimit", "Settlement", "SluiceError",
           "UnmatchedWarning", "limited", "take_turn"]
__version__ = "0.1.0"
