"""Decode-step rules: acceptance (greedy, exact rejection sampling) and the DSpark verify budget."""
