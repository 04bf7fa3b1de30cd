"""Model code, caches and decode loops. Imports with torch (and triton on GPU) alone."""
