"""One orchestrator pass of a run: replaying its body (or planning its graph) against the stored
steps, and the `wf` handle the body drives. Imports `store` only (the map:
`pikku_workflows.engine`)."""
