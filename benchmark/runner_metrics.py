"""Aggregates per-request results into the summary table and results.json."""

import math

from benchmark.runner_client import RequestResult

PERCENTILES = (50, 95, 99)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of an already sorted list."""
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def distribution(values_s: list[float]) -> dict[str, float | None]:
    """mean and percentiles in milliseconds; None when there is nothing to measure."""
    values = sorted(v * 1000 for v in values_s)
    stats: dict[str, float | None] = {"mean": sum(values) / len(values) if values else None}
    for q in PERCENTILES:
        stats[f"p{q}"] = percentile(values, q) if values else None
    return stats


def summarize(results: list[RequestResult], wall_time_s: float) -> dict:
    ok = [r for r in results if r.error is None]
    failed = sorted((r for r in results if r.error is not None), key=lambda r: r.finished_at)
    total_tokens = sum(r.output_tokens for r in ok)
    tpots = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {
        "completed": len(ok),
        "errors": len(failed),
        "first_error": failed[0].error if failed else None,
        "wall_time_s": wall_time_s,
        "request_throughput": len(ok) / wall_time_s if wall_time_s > 0 else 0.0,
        "output_throughput": total_tokens / wall_time_s if wall_time_s > 0 else 0.0,
        "total_output_tokens": total_tokens,
        "ttft_ms": distribution([r.ttft for r in ok]),
        "itl_ms": distribution([gap for r in ok for gap in r.itls]),
        "tpot_ms": distribution(tpots),
        "e2e_latency_ms": distribution([r.e2e for r in ok]),
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(metrics: dict, title: str) -> str:
    width = 58
    lines = [f" {title} ".center(width, "=")]
    rows = [
        ("Completed requests", str(metrics["completed"])),
        ("Errors", str(metrics["errors"])),
        ("Wall time (s)", f"{metrics['wall_time_s']:.2f}"),
        ("Request throughput (req/s)", f"{metrics['request_throughput']:.2f}"),
        ("Output throughput (tok/s)", f"{metrics['output_throughput']:.2f}"),
        ("Total output tokens", str(metrics["total_output_tokens"])),
    ]
    lines += [f"{name:<40}{value:>18}" for name, value in rows]
    lines.append("-" * width)
    header = ["Latency (ms)", "mean"] + [f"p{q}" for q in PERCENTILES]
    lines.append(f"{header[0]:<18}" + "".join(f"{h:>10}" for h in header[1:]))
    for name, key in (
        ("TTFT", "ttft_ms"),
        ("ITL", "itl_ms"),
        ("TPOT", "tpot_ms"),
        ("E2E latency", "e2e_latency_ms"),
    ):
        stats = metrics[key]
        cells = [stats["mean"]] + [stats[f"p{q}"] for q in PERCENTILES]
        lines.append(f"{name:<18}" + "".join(f"{_fmt(c):>10}" for c in cells))
    lines.append("=" * width)
    if metrics["first_error"]:
        lines.append(f"First error: {metrics['first_error']}")
    return "\n".join(lines)


def request_records(results: list[RequestResult]) -> list[dict]:
    """Per-request rows for results.json, in request order."""
    return [
        {
            "index": r.index,
            "requested_tokens": r.requested_tokens,
            "output_tokens": r.output_tokens,
            "ttft_ms": None if r.ttft is None else r.ttft * 1000,
            "e2e_latency_ms": None if r.error is not None else r.e2e * 1000,
            "error": r.error,
        }
        for r in sorted(results, key=lambda r: r.index)
    ]
