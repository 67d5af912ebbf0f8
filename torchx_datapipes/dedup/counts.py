"""The dedup manifest's counts (issue 30), computed from the final components."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchx_datapipes.dedup.components import cluster_sizes

__all__ = ["DedupCounts"]


@dataclass(frozen=True)
class DedupCounts:
    """Counts for one dedup run. A cluster is a component of at least two records."""

    records_in: int
    records_out: int
    candidate_pairs: int  # distinct pairs sharing a band key (exact mode: pairs of equal keys)
    verified_pairs: int  # candidate pairs whose exact Jaccard reached the threshold
    clusters: int
    largest_cluster: int  # records in the largest cluster (0: no duplicates)

    @classmethod
    def from_labels(
        cls, records_in: int, candidate_pairs: int, verified_pairs: int, labels: Mapping[Any, Any]
    ) -> DedupCounts:
        """Counts from the global ``{id: representative}`` labels (records in no edge: singletons)."""
        sizes = [s for s in cluster_sizes(labels).values() if s > 1]
        removed = sum(sizes) - len(sizes)
        return cls(
            records_in=records_in,
            records_out=records_in - removed,
            candidate_pairs=candidate_pairs,
            verified_pairs=verified_pairs,
            clusters=len(sizes),
            largest_cluster=max(sizes, default=0),
        )

    @property
    def false_positive_rate(self) -> float:
        """Share of candidate pairs that verification rejected (0.0 without candidates)."""
        if not self.candidate_pairs:
            return 0.0
        return (self.candidate_pairs - self.verified_pairs) / self.candidate_pairs

    def as_manifest(self) -> dict[str, int | float]:
        return {
            "records_in": self.records_in,
            "records_out": self.records_out,
            "candidate_pairs": self.candidate_pairs,
            "verified_pairs": self.verified_pairs,
            "false_positive_rate": self.false_positive_rate,
            "clusters": self.clusters,
            "largest_cluster": self.largest_cluster,
        }
