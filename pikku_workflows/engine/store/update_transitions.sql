-- Updates' statements that the ORM cannot write (docs/long-lived-runs.md).

-- name: announce_answer
-- Tell the caller waiting for update row %(channel)s's answer (it LISTENs on that channel) that
-- the answer is written: delivered when this transaction commits, never before.
SELECT pg_notify(%(channel)s, '')
