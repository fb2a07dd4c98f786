"""The tables: run, step, approval and signal rows, leases on the database clock, every row lock
(`claims`) and every status change (`*transition*`), with their named SQL. Imports no other
engine layer (the map: `pikku_workflows.engine`)."""
