"""`gymfleet/Harness-v0`: a task env played by an agent harness that runs its own loop (docs/harness.md)."""
