"""What adapters call: start, read, decide, signal, operate and recover runs; the step task's
body. Imports `replay` and `store`, never the other way (the map: `pikku_workflows.engine`)."""
