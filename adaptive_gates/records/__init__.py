"""The records everything reads and writes: decisions, QA and outcome records, token log-
probabilities, answer metrics, self-knowledge labels and input checks."""
