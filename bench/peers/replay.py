#!/usr/bin/python3
"""Sends each request of a file to the reference (THEIRS) and then to sluiced (OURS) and prints
how many answers differ, with the first SHOW of them. Both count in windows lined up with the
clock's seconds, so a pair of calls is never sent across a second's end: when less than
--margin of the second (0.2) is left, it waits for the next. Nor in the first second of a minute,
or the first minute of an hour: theirs names a count by its descriptor and its window's first
second, so that a minute's and an hour's window of one descriptor (a rule's and a limit
override's) share one count when they start together (docs/server.md, "Differences"). Runs on
Debian's python3-grpcio, with the reference's client (PEER/client, a gRPC client made from
Envoy's own protos).

    replay.py PEER THEIRS OURS REQUESTS.jsonl [--show N] [--margin 0.2]
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer")
    ap.add_argument("theirs")
    ap.add_argument("ours")
    ap.add_argument("requests")
    ap.add_argument("--show", type=int, default=0)
    ap.add_argument("--margin", type=float, default=0.2)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.peer, "client"))
    import grpc
    import rls_client
    from google.protobuf import json_format

    clients = [rls_client.Client(a.theirs), rls_client.Client(a.ours)]
    n = differ = 0
    for line in open(a.requests):
        if not line.strip():
            continue
        request = json_format.Parse(line, rls_client.rls_pb2.RateLimitRequest())
        now = time.time()
        if 1 - now % 1 < a.margin:
            time.sleep(1 - now % 1 + 0.002)
        now = time.time()
        if now % 3600 < 60:
            time.sleep(60.002 - now % 3600)
        elif now % 60 < 1:
            time.sleep(1.002 - now % 60)
        answers = []
        for client in clients:
            try:
                answers.append(rls_client.to_dict(client.call(request), strip_reset=True))
            except grpc.RpcError as e:
                answers.append({"grpc_error": e.code().name, "details": e.details()})
        n += 1
        if answers[0] != answers[1]:
            differ += 1
            if differ <= a.show:
                print(f"  request {n}: {line.strip()}\n    theirs: {json.dumps(answers[0])}"
                      f"\n    ours:   {json.dumps(answers[1])}")
    print(f"{n} requests: {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
