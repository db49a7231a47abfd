"""Training: the loop (trainer.py) and the modules it calls (optim, scheduler, ema, loggers)."""
