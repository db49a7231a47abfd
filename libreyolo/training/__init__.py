"""Training: the loop (trainer.py) and the modules it calls (plan, capture, bookkeeping, run_dir,
seeding, optim, scheduler, ema, loggers, distributed)."""
