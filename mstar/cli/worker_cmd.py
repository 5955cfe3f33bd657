"""``mstar worker --conductor tcp://HOST:PORT --replica I``: a replica on another host.

Its own settings (environment, --env-file, flags) are only compared: it runs with the
conductor's, and logs every knob that differs.
"""

from __future__ import annotations

import argparse

from mstar.settings.cli_args import add_settings_arguments, settings_from_args


def add_parser(subparsers) -> None:
    worker = subparsers.add_parser(
        "worker", help="run one replica for a conductor on another host",
        description="Join the conductor of `mstar serve` (MSTAR_ZMQ_TRANSPORT=tcp, "
                    "MSTAR_REMOTE_WORKERS > 0) as replica I, with the conductor's settings.")
    worker.add_argument("--conductor", required=True, metavar="tcp://HOST:PORT",
                        help="the conductor's address: MSTAR_ZMQ_TCP_HOST and "
                             "MSTAR_ZMQ_TCP_BASE_PORT of the serving host")
    worker.add_argument("--replica", required=True, type=int, metavar="I",
                        help="which replica this is (one of the last MSTAR_REMOTE_WORKERS)")
    worker.add_argument("--listen-host", default="127.0.0.1", metavar="HOST",
                        help="address of this host that the conductor can reach (its command "
                             "socket binds there, on a free port)")
    add_settings_arguments(worker)
    worker.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mstar.logging_setup import start_logging

    loaded = settings_from_args(args)
    start_logging(loaded)
    if not args.conductor.startswith("tcp://"):
        raise SystemExit(f"mstar worker: --conductor must be tcp://HOST:PORT, not {args.conductor!r}")

    from mstar.worker.remote import run_remote_worker

    return run_remote_worker(loaded.settings, args.conductor, args.replica, args.listen_host)
