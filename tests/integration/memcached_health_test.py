#!/usr/bin/env python3
"""What sluiced says of its health on the Memcached store, as health_test.py for Redis:
/healthz names the store and its state, 200 "ok" while memcached answers; with memcached
stopped, "degraded" (200) under --redis-on-failure allow or local (their policy decides),
503 "unavailable" under deny, and /healthcheck agrees (500 where /healthz is 503); all back to
"ok" once memcached is. The store learns it with no request made (its watcher asks each server
its version every second). One log line when memcached is lost and one when it is back.

    python3 tests/integration/memcached_health_test.py --sluiced build/bin/sluiced
"""

import sluiced
from health_test import assert_said_lost_and_back_once, eventually
from memcached_test import MemcachedCase


class MemcachedHealthTest(MemcachedCase):
    def healthz(self, server):
        response = server.request("GET", "/healthz")
        return response.status, response.json()

    def state(self, server):
        """What /healthz and /healthcheck say, in short."""
        status, body = self.healthz(server)
        return (status, body["status"], body.get("memcached"),
                server.request("GET", "/healthcheck").status)

    def test_memcached_stopped_each_policy(self):
        servers = {"deny": self.start("--redis-timeout", "1s"),
                   "allow": self.start("--redis-on-failure", "allow"),
                   "local": self.start("--redis-on-failure", "local")}
        up = (200, "ok", "up", 200)
        for policy, server in servers.items():
            self.assertEqual(eventually(lambda: self.state(server), up, policy), up, policy)
            self.assertEqual(self.healthz(server)[1],
                             {"status": "ok", "store": "memcached", "memcached": "up",
                              "servers": "1", "servers_lost": "0", "on_failure": policy})

        self.memcached[0].kill()  # No request is made: the store sees it on its own.
        lost = (503, "unavailable", "lost", 500)
        self.assertEqual(eventually(lambda: self.state(servers["deny"]), lost, "deny"), lost)
        status, body = self.healthz(servers["deny"])
        self.assertIn("1 Memcached server(s) lost", body["error"])
        self.assertIn("1 Memcached server(s) lost",
                      servers["deny"].request("GET", "/healthcheck").body.decode())
        degraded = (200, "degraded", "lost", 200)
        for policy in ("allow", "local"):  # The policy decides: degraded, still 200.
            self.assertEqual(eventually(lambda: self.state(servers[policy]), degraded, policy),
                             degraded, policy)
            self.assertEqual(self.healthz(servers[policy])[1]["servers_lost"], "1")
            self.assertIn("sluice_memcached_servers_lost 1\n",
                          servers[policy].request("GET", "/metrics").body.decode())
        # And it does decide as /healthz says: deny fails, allow and local admit.
        self.assertEqual(servers["deny"].check("ann", domain="fleet")[0], 503)
        self.assertEqual(servers["allow"].check("ann", domain="fleet")[0], 200)
        self.assertEqual(servers["local"].check("ann", domain="fleet")[0], 200)

        self.memcached[0].start()  # No request: back as the store's watcher finds it.
        for policy, server in servers.items():
            self.assertEqual(eventually(lambda: self.state(server), up, policy, seconds=60),
                             up, policy)
        for policy, server in servers.items():
            assert_said_lost_and_back_once(self, server,
                                           f"Memcached at {self.memcached[0].address}", policy)

if __name__ == "__main__":
    sluiced.main()
