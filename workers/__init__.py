"""The long-running processes and the runtime they share; nothing else lives here.

Processes (each with its `<process>_options.py` beside it, the one list of what its
command can be told): the online worker (`online_worker`, scaled out by `scaleout`), the
batch worker (`batch_worker`), the evaluator, the click join, the recorder, the simulated
engine (`simulator`, with its clicking users, `simulator_clicking_users`) and direct
replay (`direct_replay`: the online worker's learning, run from a recording). The runtime:
one application loop (`runtime`, `runtime_options`), options declared once as CLI flags
and `RANKSTREAM_*` variables (`options`), checkpoints with their stream positions
(`checkpoint`), retries of unreachable services (`resilience`) and dead letters
(`deadletters`). What a process uses but serve uses too lives below: which model serves
in `rankstream.selection`, writing to the stream in `rankstream.producers`, metrics and
logs in `rankstream.telemetry`. (`feedback_producer` and `click_producer` here are
deprecated re-exports of `rankstream.producers`, kept one release.)
"""
