"""Files and the terminal: atomic writes, output-path checks, checkpoint files, progress bars."""
