-- Admission under a concurrency rule (docs/flow-control.md): each statement here runs in a
-- transaction that holds the key's count row (claims.sql `lock_admission_key`), so the count
-- it reads is every slot committed.

-- name: admit_queued
-- Admit as many queued runs of %(workflow)s with key %(key)s as rule %(rule)s has free slots
-- (%(max_active)s less those held): each moves queued -> running (waiting on its first pass,
-- %(waiting_pass)s) and takes its slot, counted, in this one statement. Returns the admitted
-- runs' ids.
WITH room AS (
    SELECT GREATEST(%(max_active)s::integer - held, 0) AS room FROM {slot_count}
    WHERE rule = %(rule)s::text AND key = %(key)s::text
),
chosen AS ({queued_runs_of_key}),
admitted AS (
    UPDATE {run} AS run SET status = %(run_running)s, waiting_on = %(waiting_pass)s,
        updated_at = clock_timestamp()
    FROM chosen WHERE run.id = chosen.id AND run.status = %(run_queued)s
    RETURNING run.id
),
slots AS (
    INSERT INTO {slot} (rule, key, run_id, created_at)
    SELECT %(rule)s::text, %(key)s::text, id, clock_timestamp() FROM admitted
),
counted AS (
    UPDATE {slot_count} SET held = held + (SELECT count(*) FROM admitted)
    WHERE rule = %(rule)s::text AND key = %(key)s::text
)
SELECT id FROM admitted

-- name: release_slots
-- Free the slots run %(run_id)s holds (it ended), each uncounted from its key (a limit's slot
-- held by one of its step attempts is freed with that attempt, not here).
WITH freed AS (
    DELETE FROM {slot} WHERE run_id = %(run_id)s AND step_id IS NULL RETURNING rule, key
)
UPDATE {slot_count} AS counted SET held = GREATEST(counted.held - 1, 0)
FROM freed WHERE counted.rule = freed.rule AND counted.key = freed.key

-- name: admit_due
-- Admit the queued runs without a concurrency key whose not_before came (claims.sql
-- `due_queued_runs`): queued -> running (waiting on its first pass, %(waiting_pass)s) in this
-- one statement. Returns their ids.
WITH due AS ({due_queued_runs})
UPDATE {run} AS run SET status = %(run_running)s, waiting_on = %(waiting_pass)s,
    updated_at = clock_timestamp()
FROM due WHERE run.id = due.id AND run.status = %(run_queued)s
RETURNING run.id
