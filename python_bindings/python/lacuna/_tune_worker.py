"""The measurement worker of ``lacuna.tune`` (run as ``python -m lacuna._tune_worker``): JSON
lines on stdin and stdout, as ``lacuna tune-worker``."""

from lacuna import _lacuna

if __name__ == "__main__":
    _lacuna.tune_worker()
