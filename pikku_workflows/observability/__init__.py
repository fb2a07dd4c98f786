"""What operators watch: metrics read from the tables, log records that name their run, the
admin's dashboard, and traces of committed work (docs/observability.md)."""
