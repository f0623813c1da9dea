#!/usr/bin/python3
"""Rules from xDS, the reference and sluiced side by side: one scene played against each, with
the test's own management server (tests/integration/xds_server.py), to show that server
speaks the protocol as the reference's client (go-control-plane's ADS client) expects, and
that sluiced's client says and does what the reference's says and does.

The scene: v1 pushed before the client starts (a limit of 3 per minute); the client
subscribes (node id, metadata, an extra header); a call; v2, a set with one domain twice, is
refused (NACK); a call (v1 still in force); v3 (a limit of 5) taken; a call (the count kept);
the stream dropped; the client subscribes again. Prints each side's figures in one table.

    PYTHONPATH=build/python_proto:tests/integration /usr/bin/python3 bench/peers/xds_check.py \\
        --sluiced build/bin/sluiced [--reference ../shared/peers/envoy-ratelimit/run.sh]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import rls_client
import xds_server

NODE, METADATA, HEADER = "check-node", "team=a,zone=b", ("x-check", "yes")


def rules(limit):
    return xds_server.config("rules", "xds", [
        {"key": "user", "rate_limit": {"unit": "minute", "requests_per_unit": limit}}])


def start_reference(run_sh, port):
    env = dict(os.environ, CONFIG_TYPE="GRPC_XDS_SOTW",
               CONFIG_GRPC_XDS_SERVER_URL="127.0.0.1:%d" % port,
               CONFIG_GRPC_XDS_NODE_ID=NODE, CONFIG_GRPC_XDS_NODE_METADATA=METADATA,
               CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS="%s:%s" % HEADER,
               XDS_CLIENT_BACKOFF_INITIAL_INTERVAL="1s", XDS_CLIENT_BACKOFF_MAX_INTERVAL="2s",
               LOG_LEVEL="info")
    empty = tempfile.mkdtemp(prefix="xds-check-")
    proc = subprocess.Popen([run_sh, empty], stdout=subprocess.PIPE, env=env, text=True)
    for line in proc.stdout:
        if line.startswith("RL_GRPC_ADDR="):
            return proc, int(line.strip().rsplit(":", 1)[1])
    raise SystemExit("the reference did not start")


def start_sluiced(binary, port):
    proc = subprocess.Popen(
        [binary, "--xds", "127.0.0.1:%d" % port, "--xds-node-id", NODE, "--xds-node-metadata",
         METADATA, "--xds-headers", "%s:%s" % HEADER, "--xds-backoff-initial", "1s",
         "--xds-backoff-max", "2s", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
        stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if "Envoy's rate limit API on grpc://" in line:
            return proc, int(line.split("grpc://127.0.0.1:")[1].split()[0])
    raise SystemExit("sluiced did not start")


def remaining(grpc_port):
    answer = rls_client.should_rate_limit(grpc_port, "xds", [[("user", "check")]])
    return "%s, %d left" % (answer["statuses"][0]["code"], answer["statuses"][0]["limit_remaining"])


def scene(start):
    server = xds_server.ManagementServer()
    server.push("v1", [rules(3)])
    proc, grpc_port = start(server.port)
    seen = {}
    try:
        server.wait_for(lambda r: server.acks("v1"), what="the ACK of v1")
        first = server.requests[0]
        seen["subscribe: node id"] = first.node.id
        seen["subscribe: metadata"] = ",".join(
            "%s=%s" % (k, v.string_value) for k, v in sorted(first.node.metadata.fields.items()))
        seen["subscribe: version, nonce"] = "%r, %r" % (first.version_info, first.response_nonce)
        seen["subscribe: header x-check"] = server.stream_metadata[0].get(HEADER[0])
        seen["v1 taken: call"] = remaining(grpc_port)
        server.push("v2", [rules(4), rules(4)])  # One domain twice: refused.
        nack = server.wait_for(lambda r: server.nacks(), what="the NACK of v2")[0]
        seen["v2 refused: NACK version, nonce"] = "%r, %r" % (nack.version_info,
                                                             nack.response_nonce)
        seen["v2 refused: reason names"] = "domain" if "xds" in nack.error_detail.message else "?"
        seen["v2 refused: call"] = remaining(grpc_port)
        server.push("v3", [rules(5)])
        server.wait_for(lambda r: server.acks("v3"), what="the ACK of v3")
        time.sleep(0.5)  # The reference puts a set in force after its ACK is sent.
        seen["v3 taken: call"] = remaining(grpc_port)
        streams, asked = len(server.stream_metadata), len(server.requests)
        server.drop_streams()
        again = server.wait_for(lambda r: len(server.stream_metadata) > streams and r[asked:],
                                what="a new subscription")[0]
        seen["dropped: new stream's version, nonce"] = "%r, %r" % (again.version_info,
                                                                 again.response_nonce)
        seen["dropped: call"] = remaining(grpc_port)
    finally:
        proc.terminate()
        proc.wait(30)
        server.stop()
    return seen


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluiced", required=True)
    parser.add_argument("--reference", default=os.path.join(
        here, "..", "..", "..", "shared", "peers", "envoy-ratelimit", "run.sh"))
    args = parser.parse_args()
    theirs = scene(lambda port: start_reference(args.reference, port))
    ours = scene(lambda port: start_sluiced(args.sluiced, port))
    width = max(len(k) for k in theirs)
    print("%-*s | %-28s | %s" % (width, "", "reference", "sluiced"))
    differ = 0
    for key in theirs:
        mark = "" if theirs[key] == ours.get(key) else "   <- differs"
        differ += bool(mark)
        print("%-*s | %-28s | %s%s" % (width, key, theirs[key], ours.get(key), mark))
    print("%d of %d differ" % (differ, len(theirs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
