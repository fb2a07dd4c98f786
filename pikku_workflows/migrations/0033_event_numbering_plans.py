from importlib import import_module

from django.db import migrations

# The commit that numbers a transaction's events ran two statements on an array of event ids:
# PL/pgSQL planned them afresh at every commit once the table was analyzed (a custom plan for
# each array), and on a table not analyzed yet (a new database) cached a plan that scanned the
# whole table, so a step cost more the more events there were. The numbering now runs in a
# function of its own that keeps one plan per statement, by the primary key and the (run, seq)
# index whatever the statistics say. The trigger calls it only when there is something to
# number: its other calls (one per event of the transaction) pay for no setting.
EVENT = "pikku_workflows_workflowevent"

NUMBER_EVENTS = f"""
CREATE FUNCTION pikku_number_unnumbered_events(unnumbered bigint[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    run_key integer;
    moment timestamptz;
BEGIN
    -- The run's event lock, held to the commit: the next writer of the run numbers after this
    -- commit, so seq order is commit order. Taken in key order (a transaction may write events
    -- of two runs, a child's and its parent's) and last of all, so it closes no cycle with a
    -- row lock: a row lock held FOR SHARE by many writers of one run cannot be.
    FOR run_key IN
        SELECT DISTINCT hashtext(run_id::text) FROM {EVENT} WHERE id = ANY(unnumbered) ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(1885956971, run_key);
    END LOOP;
    moment := clock_timestamp();
    UPDATE {EVENT} SET seq = numbered.seq, at = moment
    FROM (
        SELECT unnumbered_event.id,
               ROW_NUMBER() OVER (
                   PARTITION BY unnumbered_event.run_id
                   ORDER BY unnumbered_event.at, unnumbered_event.id
               ) - 1
               + COALESCE((SELECT MAX(done.seq) + 1 FROM {EVENT} done
                           WHERE done.run_id = unnumbered_event.run_id
                             AND done.seq IS NOT NULL), 0) AS seq
        FROM {EVENT} unnumbered_event
        WHERE unnumbered_event.id = ANY(unnumbered) AND unnumbered_event.seq IS NULL
    ) numbered
    WHERE {EVENT}.id = numbered.id;
END $$;

CREATE OR REPLACE FUNCTION pikku_number_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unnumbered bigint[];
BEGIN
    -- The first event of the committing transaction numbers all of them; for the rest there
    -- is nothing left. Until then `at` holds the moment the writer recorded (one process's
    -- clock, so it orders the transaction's own events: a step's success kept for the
    -- statement that creates the next step comes before it); the commit's database clock
    -- replaces it, one moment for all of them.
    unnumbered := string_to_array(
        rtrim(COALESCE(current_setting('pikku.unnumbered_events', true), ''), ','), ','
    )::bigint[];
    IF COALESCE(cardinality(unnumbered), 0) = 0 THEN RETURN NULL; END IF;
    PERFORM set_config('pikku.unnumbered_events', '', true);
    PERFORM pikku_number_unnumbered_events(unnumbered);
    RETURN NULL;
END $$;
"""

# Back to 0031's trigger function, the numbering inline.
PREVIOUS = (
    import_module("pikku_workflows.migrations.0031_event_commit_moment").number_events(True)
    + "DROP FUNCTION IF EXISTS pikku_number_unnumbered_events(bigint[]);"
)


def on_postgresql(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("pikku_workflows", "0032_limit_max_running")]

    operations = [migrations.RunPython(on_postgresql(NUMBER_EVENTS), on_postgresql(PREVIOUS))]
