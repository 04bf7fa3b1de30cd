"""Ray GPU workers and the candidate-evaluation pipeline. Not built yet."""
