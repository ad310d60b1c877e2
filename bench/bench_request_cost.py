"""Requests per file against the request model, and what a run costs at S3 list prices.

Derived from one run of `bench_objstore` (`bench/results/objstore.json`; every row of it has the
same run id, which this checks): the requests the proxy counted for each job, per file the job
handled, beside what the model asks (`../shared/ARCHITECTURE.md`, "Requests are the cost"):

* walk: one GET per node file (approximated by the generator's node count plus one root per
  version: the walk of all retained versions reads some older nodes too), one LIST per 1,000
  sized files (sizes from listings, no HEAD);
* export: one GET (definitions; node bytes come with the plan) and one PUT per copied file;
* orphans: a walk, one LIST per 1,000 listed files, one DeleteObjects per 1,000 orphans.

Then the cost of one run at S3 Standard's list prices (us-east-1, 2026: PUT/COPY/POST/LIST
$0.005 per 1,000, GET/HEAD $0.0004 per 1,000, DELETE free) scaled to 1M and 10M files at the
measured requests per file. Request charges only: storage, transfer and compute are not in it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bench.common import RESULTS_DIR, write_result

#: Dollars per request at S3 Standard list prices.
PRICE = {"get": 0.0004 / 1000, "head": 0.0004 / 1000, "put": 0.005 / 1000, "list": 0.005 / 1000, "delete": 0.0}


def model_requests(job: str, row: dict[str, Any], params: dict[str, Any]) -> float | None:
    """Requests the model allows for one measured job (see the module doc)."""
    nodes = int((params.get("generator") or {}).get("nodes") or 0)
    files = int(params.get("files") or row.get("files") or 0)
    if job == "walk":
        return nodes + params.get("versions", 0) + 1 + max(1, files // 1000)
    if job == "export":
        copied = int(row.get("files") or 0)
        return 2 * copied
    if job == "orphans":
        orphans = int(params.get("orphans") or 0)
        listed = files + orphans
        return nodes + params.get("versions", 0) + 1 + max(1, listed // 1000) + max(1, -(-orphans // 1000))
    return None


def run_cost(row: dict[str, Any]) -> float:
    return sum(PRICE.get(k, 0.0) * float(row.get(k) or 0) for k in PRICE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="small")
    p.add_argument("--source", default=str(RESULTS_DIR / "objstore.json"))
    args = p.parse_args(argv)
    with open(args.source) as f:
        doc = json.load(f)
    rows = [r for r in doc["rows"] if r.get("ok")]
    runs = {r.get("run_id") for r in rows}
    if len(runs) != 1:
        raise SystemExit(f"{args.source} holds rows of {len(runs)} runs; derive from one run only")
    params = doc.get("params") or {}
    source_run = next(iter(runs))
    # The rows are figures of the source run, not of this derivation: they carry its run and commit.
    source_commit = next((r["commit"] for r in rows if r.get("commit")), (doc.get("machine") or {}).get("git"))
    out: list[dict[str, Any]] = []
    ratios: dict[str, float | None] = {}
    # Requests do not depend on the placement or the delay: one row per job (local, 100 ms).
    for job in ("walk", "export", "orphans"):
        picked = [r for r in rows if r["job"] == job and r["execution"] == "local"]
        if not picked:
            continue
        r = max(picked, key=lambda x: x["delay_ms"])
        # Files the job handled: the lakehouse's (walk), the copied ones (export), the
        # lakehouse's and the planted orphans (orphans lists them all).
        files = {
            "walk": int(params.get("files") or 0),
            "export": int(r.get("files") or 0),
            "orphans": int(params.get("files") or 0) + int(params.get("orphans") or 0),
        }[job] or 1
        model = model_requests(job, r, params)
        per_file = r["requests"] / files
        cost = run_cost(r)
        out.append(
            {
                "job": job,
                "files": files,
                "requests": r["requests"],
                "get": r["get"],
                "put": r["put"],
                "list": r["list"],
                "head": r["head"],
                "delete": r["delete"],
                "requests_per_file": round(per_file, 3),
                "model_requests": model,
                "vs_model": round(r["requests"] / model, 3) if model else None,
                "usd_per_run": round(cost, 5),
                "usd_at_1M_files": round(cost / files * 1_000_000, 2),
                "usd_at_10M_files": round(cost / files * 10_000_000, 2),
                "run_id": source_run,
                "commit": source_commit,
            }
        )
        if model:
            ratios[f"{job}: requests / model"] = round(r["requests"] / model, 3)
    write_result(
        "request_cost",
        "Object store: requests per file against the model, and the cost of a run",
        out,
        ratios,
        scale=args.scale,
        module="request_cost",
        description=(__doc__ or "").strip(),
        params={
            "source": "bench/results/objstore.json",
            "run_id": source_run,
            "tables": params.get("tables"),
            "versions": params.get("versions"),
            "orphans": params.get("orphans"),
        },
        notes=[
            "Counts come from the latency proxy of the source run (driver and executors together); the "
            "per-file rates scale to 1M and 10M files linearly, which holds for the per-file requests "
            "(GET/PUT per file) and overstates LIST and bookkeeping, which grow slower."
        ],
    )
    for r in out:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
