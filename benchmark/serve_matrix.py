"""Serving matrix of the worker step loop: mstar with speculation on and off vs transformers serve.

    .venv/bin/python -m benchmark.serve_matrix --output-dir /tmp/serve_matrix

Every server runs alone: start it, wait for /health, run a closed-loop chat benchmark at each
concurrency c (5*c requests, 64..128 output tokens, ignore_eos), stop it. mstar speculation on/off
alternates --rounds times because the machine is noisy; ratios between neighbouring runs are the
ones to trust. A last mstar run with --phase-timing logs where the loop's time goes.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmark import runner
from benchmark.runner_client import Target, run_client

VENV_BIN = Path(sys.executable).parent


class MinTokensTarget(Target):
    """transformers serve rejects ignore_eos/min_tokens (422) but takes a generation_config JSON;
    min_new_tokens = max_new_tokens pins the output length the same way."""

    def payload(self, spec):
        body = super().payload(spec)
        if body.pop("ignore_eos", False):
            n = body.pop("min_tokens")
            body["generation_config"] = json.dumps(
                {"min_new_tokens": n, "max_new_tokens": n, "do_sample": False}
            )
        return body


def server_command(config: str, port: int, model_dir: str) -> list[str]:
    mstar = [str(VENV_BIN / "mstar"), "serve", "--port", str(port)]
    hf = [str(VENV_BIN / "transformers"), "serve", model_dir, "--host", "127.0.0.1",
          "--port", str(port), "--device", "cpu", "--dtype", "float32"]
    return {
        "mstar-on": mstar,
        "mstar-off": mstar + ["--max-consecutive-spec-steps", "0"],
        "mstar-on-timing": mstar + ["--phase-timing", "20"],
        "hf": hf,
        "hf-cb": hf + ["--continuous-batching"],
    }[config]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before /health")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"no healthy /health at {url} within {timeout_s}s")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's own process group (it spawns workers), then SIGKILL if it lingers."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def bench_args(url: str, c: int, num_requests: int, out: Path) -> argparse.Namespace:
    return runner.build_parser().parse_args([
        "--url", url, "--profiling-type", "closed_loop", "--num-requests", str(num_requests),
        "--num-warmup", "2", "--max-concurrency", str(c), "--request-type", "text_to_text",
        "--endpoint", "chat", "--ignore-eos", "--output-len-min", "64", "--output-len-max", "128",
        "--output-len-seed", "0", "--output-dir", str(out),
    ])


def run_server(config: str, label: str, concurrencies: list[int], args) -> list[dict]:
    url = f"http://127.0.0.1:{args.port}"
    run_dir = args.output_dir / label
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    log = open(run_dir / "server.log", "w")  # noqa: SIM115 - closed after the server stops
    started = time.monotonic()
    proc = subprocess.Popen(server_command(config, args.port, args.model_dir), env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rows = []
    try:
        wait_healthy(url, proc, 600)
        print(f"[{label}] healthy after {time.monotonic() - started:.1f}s", flush=True)
        runner.Target = MinTokensTarget if config.startswith("hf") else Target
        for c in concurrencies:
            n = 5 * c
            n = min(n, args.max_requests.get(config, n))
            report = run_client(runner.benchmark(bench_args(url, c, n, run_dir / f"c{c}")))
            m = report["metrics"]
            ok = [r for r in report["requests"] if r["error"] is None]
            rows.append({
                "config": label, "c": c, "requests": n, "completed": m["completed"],
                "errors": m["errors"], "tok_s": m["output_throughput"],
                "ttft_p50": m["ttft_ms"]["p50"], "itl_p50": m["itl_ms"]["p50"],
                "len_ratio": (sum(r["output_tokens"] for r in ok)
                              / max(1, sum(r["requested_tokens"] for r in ok))),
                "wall_s": m["wall_time_s"],
            })
    finally:
        stop(proc)
        log.close()
    return rows


def fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def print_summary(rows: list[dict], concurrencies: list[int]) -> None:
    cols = ("config", "c", "reqs", "done", "err", "out tok/s", "TTFT p50 ms", "ITL p50 ms",
            "out/req len", "wall s")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join([r["config"], str(r["c"]), str(r["requests"]), str(r["completed"]),
                          str(r["errors"]), fmt(r["tok_s"]), fmt(r["ttft_p50"]),
                          fmt(r["itl_p50"]), fmt(r["len_ratio"], ".3f"), fmt(r["wall_s"])]))
    tok = {(r["config"], r["c"]): r["tok_s"] for r in rows}
    labels = sorted({r["config"] for r in rows})
    print("\nratios of output tok/s")
    for c in concurrencies:
        for on in (lb for lb in labels if lb.startswith("mstar-on") and "timing" not in lb):
            off = on.replace("-on", "-off")
            if (off, c) in tok and tok[(off, c)]:
                print(f"c={c} {on}/{off}: {tok[(on, c)] / tok[(off, c)]:.2f}")
        ons = [tok[(lb, c)] for lb in labels if lb.startswith("mstar-on") and "timing" not in lb
               and (lb, c) in tok]
        for hf in (lb for lb in labels if lb.startswith("hf")):
            if ons and tok.get((hf, c)):
                print(f"c={c} mstar-on(mean)/{hf}: {sum(ons) / len(ons) / tok[(hf, c)]:.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output-dir", type=Path, default=Path("/tmp/serve_matrix"))
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--model-dir", default=str(Path.home() / ".cache/mstar/models/SmolLM2-135M-Instruct"))
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--rounds", type=int, default=2, help="mstar on/off alternations")
    p.add_argument("--hf", nargs="*", default=["hf", "hf-cb"], help="transformers configs to run")
    p.add_argument("--max-requests", nargs="*", default=["hf=8", "hf-cb=96"],
                   help="CONFIG=N caps that config's requests per concurrency (default 5*c)")
    args = p.parse_args()
    args.max_requests = {k: int(v) for k, v in (item.split("=") for item in args.max_requests)}
    rows = []
    for i in range(1, args.rounds + 1):
        for config in ("mstar-on", "mstar-off"):
            rows += run_server(config, f"{config}-{i}", args.concurrency, args)
    for config in args.hf:
        rows += run_server(config, config, args.concurrency, args)
    rows += run_server("mstar-on-timing", "mstar-on-timing", [8], args)
    (args.output_dir / "summary.json").write_text(json.dumps(rows, indent=2))
    print_summary(rows, args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
