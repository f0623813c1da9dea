#!/usr/bin/env bash
# One worker of examples/workers: before each call to the partner's API it asks sluiced for
# its turn with `sluice acquire`, which returns when the shared quota lets it go (exit 0), or
# exits 75 when it cannot within --max-wait (here: the day's quota is spent).
#
#   worker.sh ID SERVER LOG SLUICE
#
# Appends "ID call UNIX_TIME" to LOG for every call it makes (one short write: the workers
# share the file), then "ID stop STATUS" when it stops.
set -u
id=$1 server=$2 log=$3 sluice=$4
while true; do
  "$sluice" acquire --server "$server" --domain partner --descriptor api=mail --max-wait 30s \
    2>>"$log.stderr"
  status=$?
  if ((status != 0)); then
    echo "$id stop $status" >>"$log"
    exit 0
  fi
  # The call to the partner's API would be here: curl https://partner.example/...
  echo "$id call $EPOCHREALTIME" >>"$log"
done
