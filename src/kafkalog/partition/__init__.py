"""The partition layer: one partition replica over a storage log, and read-only views of log dirs."""
