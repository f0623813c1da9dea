#!/usr/bin/env bash
# Asks sluiced (started by `make run`) six times for a new user, try-<number>, whose rule in
# examples/sluice.yaml allows 5 in any minute: five 200s, then a 429. A new user on each run,
# so that a second run within the minute shows the same, not the first run's five still
# counting.
user="try-$$-$RANDOM"
for i in 1 2 3 4 5 6; do
  curl -s -o /dev/null -w '%{http_code} %header{ratelimit}\n' \
    -d '{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "'"$user"'"}]}]}' \
    "http://${HTTP:-127.0.0.1:8080}/v1/check"
done
