"""The ceiling of one durable commit per step, measured with pgbench (prints, never asserts).

A sequential run can go no faster than its server commits one step at a time. This bench asks
PostgreSQL (fsync on, as the engines run) for exactly that with pgbench and a custom script of
a step's statement shape: one statement, one commit, that records step N's result (fenced by
its attempt), inserts step N+1 with its history row and its event, and counts it on the run
row. Each pgbench client plays one run. It prints transactions per second for 1 and 2 clients:
divide a sequential figure of `bench/queued.py` (steps/s = 1000 / its ms per step) by the
1-client figure to read how close the engine comes. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.inline import database_url, recreate_database  # noqa: E402 - the benches' own

SCHEMA = """
DROP TABLE IF EXISTS ceiling_events, ceiling_history, ceiling_steps, ceiling_runs;
CREATE TABLE ceiling_runs (
    id bigint PRIMARY KEY, status text NOT NULL, steps_total int NOT NULL DEFAULT 0,
    steps_done int NOT NULL DEFAULT 0, current_step_key text, last_event_seq int NOT NULL DEFAULT 0,
    last_step_id bigint
);
CREATE TABLE ceiling_steps (
    id bigserial PRIMARY KEY, run_id bigint NOT NULL REFERENCES ceiling_runs,
    step_key text NOT NULL, status text NOT NULL, data jsonb, result jsonb,
    attempt int NOT NULL DEFAULT 1, created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, step_key)
);
CREATE TABLE ceiling_history (
    id bigserial PRIMARY KEY, step_id bigint NOT NULL REFERENCES ceiling_steps,
    attempt int NOT NULL, status text NOT NULL, at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON ceiling_history (step_id);
CREATE TABLE ceiling_events (
    run_id bigint NOT NULL REFERENCES ceiling_runs, seq int NOT NULL, kind text NOT NULL,
    step_key text, at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (run_id, seq)
);
INSERT INTO ceiling_runs (id, status) SELECT g, 'running' FROM generate_series(1, 64) g;
"""

# One step: the previous one (the run row names it; every CTE reads the snapshot from before
# the statement) succeeds, the next one is written and counted. The step key is random so that
# clients never collide and each transaction inserts a fresh row.
STEP_SCRIPT = """
\\set key random(1, 2000000000)
WITH moved AS (
    UPDATE ceiling_steps SET status = 'succeeded', result = '{"ok": true}'
    WHERE id = (SELECT last_step_id FROM ceiling_runs WHERE id = :client_id + 1) AND attempt = 1
    RETURNING id
), run AS (
    UPDATE ceiling_runs SET steps_total = steps_total + 1, steps_done = steps_done + 1,
        current_step_key = 's' || :key, last_event_seq = last_event_seq + 1,
        last_step_id = nextval('ceiling_steps_id_seq')
    WHERE id = :client_id + 1 AND status = 'running'
    RETURNING id, last_event_seq, last_step_id
), new_step AS (
    INSERT INTO ceiling_steps (id, run_id, step_key, status, data)
    SELECT last_step_id, id, 's' || :key, 'running', '{"i": 1}' FROM run RETURNING id
), history AS (
    INSERT INTO ceiling_history (step_id, attempt, status)
    SELECT id, 1, 'running' FROM new_step
)
INSERT INTO ceiling_events (run_id, seq, kind, step_key)
SELECT id, last_event_seq, 'step_started', 's' || :key FROM run;
"""


def recreate(server: str, name: str) -> None:
    import psycopg

    recreate_database(server, name)
    with psycopg.connect(database_url(server, name), autocommit=True) as conn:
        conn.execute(SCHEMA)


def commits_per_second(server: str, name: str, clients: int, seconds: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(STEP_SCRIPT)
        script.flush()
        command = ["pgbench", "-n", "-f", script.name, "-c", str(clients), "-j", str(clients)]
        command += ["-T", str(seconds), database_url(server, name)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    found = re.search(r"tps = ([\d.]+)", output)
    if found is None:
        raise RuntimeError(f"pgbench printed no tps:\n{output}")
    return float(found.group(1))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432"),
        help="PostgreSQL server URL without a database (default: %(default)s)",
    )
    parser.add_argument("--db", default="ceiling_bench")
    parser.add_argument("--seconds", type=int, default=10, help="per pgbench run")
    parser.add_argument("--clients", default="1,2")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if shutil.which("pgbench") is None:
        raise SystemExit("pgbench is not installed (Debian: postgresql-client)")
    recreate(args.server, args.db)
    print("one durable commit per step, the step's statement shape (pgbench, fsync on):")
    for clients in (int(c) for c in args.clients.split(",")):
        rate = commits_per_second(args.server, args.db, clients, args.seconds)
        print(f"  {clients} client(s): {rate:,.0f} steps/s ({1000 / rate * clients:.3f} ms/step)")


if __name__ == "__main__":
    main()
