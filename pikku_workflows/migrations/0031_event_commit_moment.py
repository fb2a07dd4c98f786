from django.db import migrations

# The events a commit numbers share one moment of the database clock. Read per row, the clock
# followed the order the UPDATE happened to visit its rows in, so a later seq could carry an
# earlier time than the seq before it.
EVENT = "pikku_workflows_workflowevent"


def number_events(per_commit: bool) -> str:
    """The numbering trigger's function: stamping a commit's events with one moment, read once
    its locks are held, or (as before) the clock as each row is updated."""
    take_moment = "moment := clock_timestamp();" if per_commit else ""
    stamp = "moment" if per_commit else "clock_timestamp()"
    return f"""
CREATE OR REPLACE FUNCTION pikku_number_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unnumbered bigint[];
    run_key integer;
    moment timestamptz;
BEGIN
    -- The first event of the committing transaction numbers all of them; for the rest there
    -- is nothing left. Until then `at` holds the moment the writer recorded (one process's
    -- clock, so it orders the transaction's own events: a step's success kept for the
    -- statement that creates the next step comes before it); the commit's database clock
    -- replaces it.
    unnumbered := string_to_array(
        rtrim(COALESCE(current_setting('pikku.unnumbered_events', true), ''), ','), ','
    )::bigint[];
    IF COALESCE(cardinality(unnumbered), 0) = 0 THEN RETURN NULL; END IF;
    PERFORM set_config('pikku.unnumbered_events', '', true);
    -- The run's event lock, held to the commit: the next writer of the run numbers after this
    -- commit, so seq order is commit order. Taken in key order (a transaction may write events
    -- of two runs, a child's and its parent's) and last of all, so it closes no cycle with a
    -- row lock: a row lock held FOR SHARE by many writers of one run cannot be.
    FOR run_key IN
        SELECT DISTINCT hashtext(run_id::text) FROM {EVENT} WHERE id = ANY(unnumbered) ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(1885956971, run_key);
    END LOOP;
    {take_moment}
    UPDATE {EVENT} SET seq = numbered.seq, at = {stamp}
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
    RETURN NULL;
END $$;
"""


def on_postgresql(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("pikku_workflows", "0030_observability_indexes")]

    operations = [
        migrations.RunPython(
            on_postgresql(number_events(True)), on_postgresql(number_events(False))
        ),
    ]
