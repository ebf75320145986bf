"""A run's results: scored into byte-deterministic files, written as a folder, read back, resumed, shown as
tables, compared, an estimate confirmed, intervals over rows."""
