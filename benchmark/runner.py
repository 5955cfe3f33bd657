"""mstar benchmark runner: replays a seeded synthetic workload against a streaming server.

    python -m benchmark.runner --url http://127.0.0.1:8000 --profiling-type closed_loop \\
        --max-concurrency 8 --num-requests 64 --endpoint chat --ignore-eos --output-dir out/

closed_loop keeps at most --max-concurrency requests in flight (a new one starts when one
finishes); online sends Poisson arrivals at --rate req/s, optionally capped by --max-concurrency.
Works against any OpenAI-compatible server, plus mstar's native NDJSON /generate endpoint.
"""

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

from benchmark.http_stream import HttpSession, HttpStatusError
from benchmark.runner_client import RequestResult, Target, run_client, send_request, session
from benchmark.runner_metrics import format_table, request_records, summarize
from benchmark.runner_workload import RequestSpec, make_requests, poisson_gaps

Send = Callable[[RequestSpec], Awaitable[RequestResult]]


class RunnerError(Exception):
    """A configuration or connectivity problem that makes the run impossible."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmark.runner", description=__doc__.split("\n")[0]
    )
    p.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    p.add_argument("--profiling-type", choices=("closed_loop", "online"), default="closed_loop")
    p.add_argument("--num-requests", type=int, default=100, help="measured requests")
    p.add_argument("--num-warmup", type=int, default=0, help="unmeasured requests sent first")
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="requests in flight (required for closed_loop; optional cap for online)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=float("inf"),
        help="online arrival rate in req/s (inf = all at once)",
    )
    p.add_argument("--request-type", choices=("text_to_text",), default="text_to_text")
    p.add_argument("--endpoint", choices=("chat", "completions", "generate"), default="chat")
    p.add_argument("--model", default=None, help="default: first entry of GET /v1/models")
    p.add_argument("--api-key", default=None, help="sent as a Bearer token")
    p.add_argument(
        "--ignore-eos", action="store_true", help="force exactly the drawn output length"
    )
    p.add_argument("--output-len-min", type=int, default=128)
    p.add_argument("--output-len-max", type=int, default=128)
    p.add_argument("--output-len-seed", type=int, default=0)
    p.add_argument("--prompt-len", type=int, default=32, help="approximate prompt length in words")
    p.add_argument("--seed", type=int, default=0, help="seed for prompts and arrival times")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds")
    p.add_argument("--output-dir", type=Path, default=Path("bench-results"))
    return p


def validate(args: argparse.Namespace) -> None:
    checks = [
        (args.num_requests >= 1, "--num-requests must be >= 1"),
        (args.num_warmup >= 0, "--num-warmup must be >= 0"),
        (
            args.max_concurrency is None or args.max_concurrency >= 1,
            "--max-concurrency must be >= 1",
        ),
        (
            args.profiling_type != "closed_loop" or args.max_concurrency is not None,
            "--max-concurrency is required with --profiling-type closed_loop",
        ),
        (args.rate > 0, "--rate must be > 0"),
        (args.output_len_min >= 1, "--output-len-min must be >= 1"),
        (
            args.output_len_max >= args.output_len_min,
            "--output-len-max must be >= --output-len-min",
        ),
        (args.prompt_len >= 1, "--prompt-len must be >= 1"),
        (args.temperature >= 0, "--temperature must be >= 0"),
        (args.timeout > 0, "--timeout must be > 0"),
    ]
    for ok, message in checks:
        if not ok:
            raise RunnerError(message)


def base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def resolve_model(client: HttpSession, args: argparse.Namespace, base: str) -> str:
    if args.model:
        return args.model
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        return (await client.get_json(base + "/v1/models", headers))["data"][0]["id"]
    except (HttpStatusError, OSError, asyncio.TimeoutError, msgspec.DecodeError, KeyError,
            IndexError, TypeError) as exc:
        if args.endpoint == "generate":
            return "default"
        raise RunnerError(
            f"could not list models at {base}/v1/models ({exc}); pass --model"
        ) from exc


async def run_closed_loop(
    send: Send, specs: list[RequestSpec], concurrency: int
) -> list[RequestResult]:
    """`concurrency` workers share one queue, so a new request starts only when one finishes."""
    pending = iter(specs)
    results: list[RequestResult] = []

    async def worker() -> None:
        for spec in pending:
            results.append(await send(spec))

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(specs)))))
    return results


async def run_online(
    send: Send, specs: list[RequestSpec], gaps: list[float], concurrency: int | None
) -> list[RequestResult]:
    """Start request i at the i-th Poisson arrival time; an optional semaphore caps in-flight."""
    gate = asyncio.Semaphore(concurrency) if concurrency else None

    async def one(spec: RequestSpec) -> RequestResult:
        if gate is None:
            return await send(spec)
        async with gate:
            return await send(spec)

    loop = asyncio.get_running_loop()
    start = loop.time()
    due = 0.0
    tasks = []
    for spec, gap in zip(specs, gaps, strict=True):
        delay = start + due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(spec)))
        due += gap
    return list(await asyncio.gather(*tasks))


async def benchmark(args: argparse.Namespace) -> dict:
    """Run warm-up then the measured phase; print the table and write results.json."""
    validate(args)
    base = base_url(args.url)
    async with session(args.timeout) as client:
        model = await resolve_model(client, args, base)
        target = Target(base, args.endpoint, model, args.ignore_eos, args.temperature, args.api_key)

        async def send(spec: RequestSpec) -> RequestResult:
            return await send_request(client, target, spec)

        specs = make_requests(
            args.num_requests,
            args.prompt_len,
            args.output_len_min,
            args.output_len_max,
            args.seed,
            args.output_len_seed,
        )
        if args.num_warmup:
            warm = make_requests(
                args.num_warmup,
                args.prompt_len,
                args.output_len_min,
                args.output_len_max,
                args.seed + 1,
                args.output_len_seed + 1,
            )
            warm_results = await run_closed_loop(send, warm, args.max_concurrency or len(warm))
            failed = sum(r.error is not None for r in warm_results)
            print(f"Warm-up: {len(warm)} requests, {failed} errors")

        start = time.perf_counter()
        if args.profiling_type == "closed_loop":
            results = await run_closed_loop(send, specs, args.max_concurrency)
        else:
            gaps = poisson_gaps(len(specs), args.rate, args.seed)
            results = await run_online(send, specs, gaps, args.max_concurrency)
        wall = time.perf_counter() - start

    metrics = summarize(results, wall)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    config["api_key"] = "***" if args.api_key else None
    config["model"] = model
    config["rate"] = None if args.rate == float("inf") else args.rate  # null: all at once
    report = {"config": config, "metrics": metrics, "requests": request_records(results)}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "results.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    title = f"mstar benchmark: {args.endpoint} / {args.profiling_type}"
    print(format_table(metrics, title))
    print(f"Results written to {args.output_dir / 'results.json'}")
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run_client(benchmark(args))
    except RunnerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if report["metrics"]["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
