"""`rankstream simulate`: the CBIR engine and its users, producing triplets and judged queries
(or, with `--feedback clicks:MODEL`, impressions and clicks)."""

from __future__ import annotations

import sys
from typing import Any

from rankstream.commands._launch import Launch, long_running
from rankstream.simulators.click_models import FEEDBACK_JUDGED
from rankstream.workers.simulator_options import SimulateOptions


class Simulating:
    """The simulation with a progress bar on stderr; SIGTERM/SIGINT stop it cleanly."""

    def __init__(self, launch: Launch) -> None:
        from rankstream.commands._usage import UsageError, options_checked
        from rankstream.simulators.fashion_mnist import FashionMNISTMissingError
        from rankstream.workers.simulator import Simulation

        self.launch, self.summary = launch, None
        try:
            with options_checked():
                self.simulation = Simulation(launch.settings, launch.options, progress=True)
        except FashionMNISTMissingError as exc:  # names the Debian package to install
            raise UsageError(str(exc)) from exc

    def install_signal_handlers(self) -> None:
        self.simulation.runtime.install_signal_handlers()

    def run(self) -> int:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        columns = (
            TextColumn("simulate [dim]{task.fields[model]}"),
            BarColumn(),
            MofNCompleteColumn(),
        )
        with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
            options = self.launch.options
            by_queries = options.triplets is None or options.feedback != FEEDBACK_JUDGED
            total = options.queries if by_queries else options.triplets
            task = bar.add_task("simulate", total=total, model="")

            def advance(result: Any) -> None:
                served = result.served
                step = 1 if by_queries else result.triplets
                bar.update(task, advance=step, model=f"{served.name} v{served.version}")

            try:
                self.summary = self.simulation.run(on_step=advance)
            except LookupError as exc:
                print(f"serving model unavailable: {exc}", file=sys.stderr)
                return 1
        if not self.launch.json:
            s = self.summary
            produced = (
                f"{s['triplets']} triplets"
                if s["feedback"] == FEEDBACK_JUDGED
                else f"{s['clicks']} clicks ({s['feedback']})"
            )
            print(
                f"produced {produced} from {s['queries']} queries "
                f"in {s['seconds']} s; served by {s['served_by']}",
                file=sys.stderr,
            )
        return 0

    def report(self) -> dict[str, Any] | None:
        return self.summary


add_arguments, run = long_running(
    "simulate",
    SimulateOptions,
    Simulating,
    "at exit: feedback, triplets, queries, clicks, seconds, models served",
)
