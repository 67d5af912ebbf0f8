"""``OUT/report.html`` of a dedup job: one self-contained page (no scripts, no network).

The duplicate fraction, the counts and parameters, the distribution of cluster sizes, and the
largest clusters with their first records (the kept one first) and each one's Jaccard with it.
Written by rank 0 at the commit from the manifest's ``dedup`` section and the examples the write
pass collected (``runner/dedup.py``); every text is HTML-escaped.
"""

import html
from typing import Any, Dict, List, Sequence

from torchx_datapipes.io.checksum import write_file
from torchx_datapipes.io.fs import join

REPORT = "report.html"
_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}"
    ".bar{background:#4a7;height:.8em}.num{text-align:right}pre{white-space:pre-wrap;margin:0}"
)


def _e(value: Any) -> str:
    return html.escape(str(value))


def _summary(d: Dict[str, Any]) -> str:
    fraction = 1 - d["records_out"] / d["records_in"] if d["records_in"] else 0.0
    rows = [
        ("duplicate fraction", f"{fraction:.2%}"),
        ("records with text", f"{d['records_in']:,}"),
        ("kept (first of each cluster)", f"{d['records_out']:,}"),
        ("duplicates", f"{d['removed']:,}"),
        ("clusters (2+ records)", f"{d['clusters']:,}"),
        ("largest cluster", f"{d['largest_cluster']:,}"),
        ("candidate pairs", f"{d['candidate_pairs']:,}"),
        ("verified pairs", f"{d['verified_pairs']:,}"),
        ("false-positive rate", f"{d['false_positive_rate']:.2%}"),
    ]
    params = f"method {d['method']}, action {d['action']}"
    if d["method"] == "near":
        params += (
            f", threshold {d['threshold']}, {d['ngram']}-word shingles, {d['bands']} bands x {d['rows']} rows"
            f" of {d['num_perm']} MinHash values, verify {d['verify']}"
        )
    body = "".join(f"<tr><th>{_e(k)}</th><td class=num>{_e(v)}</td></tr>" for k, v in rows)
    return f"<p>{_e(params)}</p><table>{body}</table>"


def _sizes(sizes: Dict[str, int]) -> str:
    if not sizes:
        return "<p>No duplicates.</p>"
    top = max(sizes.values())
    rows = "".join(
        f"<tr><td class=num>{_e(s)}</td><td class=num>{n:,}</td>"
        f"<td><div class=bar style='width:{max(1, round(300 * n / top))}px'></div></td></tr>"
        for s, n in sorted(sizes.items(), key=lambda kv: int(kv[0]))
    )
    return f"<table><tr><th>cluster size</th><th>clusters</th><th></th></tr>{rows}</table>"


def _largest(largest: Sequence[Dict[str, Any]], examples: Sequence[List[Dict[str, Any]]]) -> str:
    parts = []
    for cluster, shown in zip(largest, examples):
        rows = "".join(
            f"<tr><td>{_e(r['file'])}:{r['line']}</td><td class=num>{r['jaccard']:.3f}</td>"
            f"<td><pre>{_e(r['text'])}</pre></td></tr>"
            for r in shown
        )
        kept = f"{_e(cluster['file'])}:{cluster['line']} (id {cluster['id']})"
        parts.append(
            f"<h3>{cluster['size']} records, kept {kept}</h3>"
            f"<table><tr><th>record</th><th>Jaccard with the kept one</th><th>text</th></tr>{rows}</table>"
        )
    return "".join(parts) or "<p>No clusters.</p>"


def write_report(output: str, section: Dict[str, Any], examples: Sequence[List[Dict[str, Any]]]) -> str:
    """Write ``OUT/report.html`` (atomically) and return its URL."""
    page = (
        f"<!doctype html><meta charset=utf-8><title>dedup report</title><style>{_STYLE}</style>"
        f"<h1>dedup report</h1>{_summary(section)}"  # the same bytes for any -j and output
        f"<h2>Cluster sizes</h2>{_sizes(section['cluster_sizes'])}"
        f"<h2>Largest clusters</h2>{_largest(section['largest_clusters'], examples)}"
    )
    url = join(output, REPORT)
    write_file(url, page.encode("utf-8"))
    return url
