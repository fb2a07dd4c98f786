-- The statements of a purge, one per table and foreign key the purge plan (purge_rows.py) reads
-- from the models' `_meta`: {table}, {pk} and {column} are quoted names from it, {among_ids} the
-- vendor's test of membership in the list %(ids)s. Each finds its rows by an index that leads
-- with {column} (the purge's tests check each).

-- name: delete_rows
-- The rows of {table} with the ids %(ids)s, gone.
DELETE FROM {table} WHERE {pk} {among_ids}

-- name: delete_naming
-- The rows of {table} whose {column} is one of %(ids)s, gone.
DELETE FROM {table} WHERE {column} {among_ids}

-- name: delete_naming_returning
-- The rows of {table} whose {column} is one of %(ids)s, gone; their ids (what the rows naming
-- them are found by).
DELETE FROM {table} WHERE {column} {among_ids} RETURNING {pk}

-- name: clear_naming
-- Rows of {table} that stay stop naming a purged row (one of %(ids)s) by {column}.
UPDATE {table} SET {column} = NULL WHERE {column} {among_ids}
