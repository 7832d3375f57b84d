"""The training runtime: the composition root `run_training`, the trainer and its seams (train step,
checkpointer, stopping policy, schedules, loss), and what a run needs around them (signals,
precision, distributed, resume, the run lock, TensorBoard views)."""
