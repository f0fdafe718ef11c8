"""`rankstream serve`: the HTTP API: rank with the learned models, ingest feedback."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default=None,
        help="bind address (default RANKSTREAM_API_HOST, else 127.0.0.1)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="port, 0 for any free one (default RANKSTREAM_API_PORT, else 8000)",
    )
    parser.add_argument(
        "--workers",
        choices=("auto", "on", "off"),
        default="auto",
        help="run the online worker and the evaluator in this process: auto (default) = "
        "when no Kafka/Redis is configured (the embedded pipeline lives in one process)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=1.0,
        metavar="S",
        help="re-read the store at least this often besides its announcements (default 1)",
    )
    add_json_argument(parser, "once listening: its URL, port and what backs it")


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._usage import UsageError
    from rankstream.serve.app import serve
    from rankstream.stream.settings import Settings
    from rankstream.workers.metrics import start_metrics_server
    from rankstream.workers.structured_log import configure_logging

    configure_logging()
    settings = Settings.from_env()
    changes = {"api_host": args.host, "api_port": args.port}
    settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
    if not args.poll_seconds > 0 or not 0 <= settings.api_port < 65536:
        raise UsageError("--poll-seconds must be > 0 and the port within 0..65535")
    embedded = not settings.kafka_bootstrap and not settings.redis_url
    workers = args.workers == "on" or (args.workers == "auto" and embedded)
    if embedded:
        print(
            "note: no RANKSTREAM_KAFKA_BOOTSTRAP / RANKSTREAM_REDIS_URL: embedded transport "
            "and store (this process only)" + ("; learning in-process" if workers else ""),
            file=sys.stderr,
        )
    metrics_port = start_metrics_server(settings)

    def listening(host: str, port: int) -> None:
        url = f"http://{host}:{port}"
        if not args.json:
            print(f"serving on {url}", file=sys.stderr)
            return
        print_json(
            {
                "url": url,
                "host": host,
                "port": port,
                "metrics_port": metrics_port,
                "workers": workers,
                "transport": "kafka" if settings.kafka_bootstrap else "embedded",
                "store": "redis" if settings.redis_url else "embedded",
            }
        )

    return serve(settings, poll_seconds=args.poll_seconds, workers=workers, on_listening=listening)
