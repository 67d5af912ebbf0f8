"""The runner reads inputs, writes outputs and loads artifacts on s3:// (a real moto server)."""

import json
from typing import Any, Dict

import fsspec
import orjson
from s3_fixture import S3Server
from tdp_testutil import canon, records

from torchx_datapipes import artifact
from torchx_datapipes.runner.main import main


def test_transform_and_stats_on_s3(s3_server: S3Server) -> None:
    recs = records(300)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for k in range(3):
        with fs.open(s3_server.url(f"in/part-{k}.jsonl"), "wb") as fh:
            fh.write(b"".join(orjson.dumps(r) + b"\n" for r in recs[k * 100 : (k + 1) * 100]))

    def add(r: Dict[str, Any]) -> Dict[str, Any]:
        return {**r, "y": r["x"] * 2}

    ref = artifact.package(add, s3_server.url("artifacts"))
    out = s3_server.url("out/t")
    args = ["transform", "--input", s3_server.url("in/*.jsonl"), "--output", out, "--artifact", ref.url]
    m = main([*args, "--sha256", ref.sha256, "--num_workers", "2", "--unit_mb", "0.004"])
    assert m is not None and m["records_out"] == 300 and len(m["units"]) > 3
    fs.invalidate_cache()
    got = [orjson.loads(x) for p in sorted(fs.glob(f"{out}/part-*.jsonl")) for x in fs.cat(p).splitlines()]
    assert canon(got) == canon([add(r) for r in recs])
    assert fs.exists(f"{out}/_SUCCESS") and not fs.glob(f"{out}/**/.tmp-*")

    stats_out = s3_server.url("out/stats")
    main(["stats", "--input", s3_server.url("in/*.jsonl"), "--output", stats_out])
    fs.invalidate_cache()
    doc = json.loads(fs.cat(f"{stats_out}/stats.json"))
    assert doc["records"] == 300 and doc["fields"]["x"]["numeric"]["sum"] == sum(r["x"] for r in recs)
    assert fs.exists(f"{stats_out}/report.html") and fs.exists(f"{stats_out}/_SUCCESS")
