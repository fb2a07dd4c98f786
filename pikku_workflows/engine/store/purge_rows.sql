-- The statements of a purge, one per table and foreign key the purge plan (purge_rows.py) reads
-- from the models' `_meta`: {table}, {pk} and {column} are quoted names from it, {among_ids} the
-- vendor's test of membership in the list %(ids)s.

-- name: referencing_rows
-- The ids of the rows of {table} whose {column} is one of %(ids)s (served by an index that
-- leads with {column}: the purge's tests check each).
SELECT {pk} FROM {table} WHERE {column} {among_ids}

-- name: delete_referencing
-- The rows of {table} whose {column} is one of %(ids)s, gone (rows no key names).
DELETE FROM {table} WHERE {column} {among_ids}

-- name: delete_rows
-- The rows of {table} with the ids %(ids)s, gone.
DELETE FROM {table} WHERE {pk} {among_ids}
