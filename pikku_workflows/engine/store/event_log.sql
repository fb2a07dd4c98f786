-- The event log's statements (its rows are written by triggers on the history and audit tables).

-- name: number_own_events
-- Number the events this transaction has written so far now instead of at its commit, taking
-- their runs' event locks until it ends (a reader inside the writing transaction sees its own
-- events in order); events it writes after are numbered at its commit again.
SET CONSTRAINTS pikku_number_events IMMEDIATE;
SET CONSTRAINTS pikku_number_events DEFERRED
