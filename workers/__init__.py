"""Ray GPU workers and the candidate-evaluation entrypoint they run in a subprocess."""
