"""The training runtime: the composition root `run_training`, the trainer and its seams (the train
step and its loss, checkpointer, stopping policy and stop signals, optimizer and schedules), and
what a run needs around them (precision, distributed, resume, the run directory and its lock,
TensorBoard views)."""
