"""Random ShouldRateLimit requests for one rules file, one JSON request per line (protobuf
JSON, as rls_client.py --replay reads them): descriptors that match the file's rules at every
depth (wildcards filled in), deeper ones, unmatched values, hits_addend 0 to 7, limit overrides
and request-level hits.

    python3 requests.py RULES.yaml SEED COUNT > requests.jsonl
"""
import json, random, sys, yaml
random.seed(int(sys.argv[2]))
doc = yaml.safe_load(open(sys.argv[1]))
domain = doc["domain"]
paths = []
def walk(descs, prefix):
    for d in descs or []:
        v = d.get("value")
        if v in (None, ""):
            v = random.choice(["x", "y", "some-value"])
        if isinstance(v, str) and "*" in v:
            v = v.replace("*", random.choice(["", "a", "zz/9"]))
        entry = (d["key"], str(v))
        paths.append(prefix + [entry])
        walk(d.get("descriptors"), prefix + [entry])
walk(doc.get("descriptors"), [])
out = []
for _ in range(int(sys.argv[3])):
    descs = []
    for _ in range(random.choice([1, 1, 2, 3])):
        p = random.choice(paths) if paths else [("k", "v")]
        if random.random() < 0.15:
            p = p + [("extra", "e")]
        if random.random() < 0.1:
            p = [(k, v + "-other") for k, v in p]
        d = {"entries": [{"key": k, "value": v} for k, v in p]}
        if random.random() < 0.15:
            d["hits_addend"] = random.choice([0, 1, 3, 7])
        if random.random() < 0.05:
            d["limit"] = {"requests_per_unit": random.choice([0, 2, 5]), "unit": random.choice(["MINUTE", "HOUR"])}
        descs.append(d)
    r = {"domain": domain, "descriptors": descs}
    if random.random() < 0.2:
        r["hits_addend"] = random.choice([1, 2, 4])
    out.append(json.dumps(r))
print("\n".join(out))
