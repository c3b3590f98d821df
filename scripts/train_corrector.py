"""The name `scripts/train_dcoco_head.py` went by: the same command line, the same run (train a DCOCO head)."""

from train_dcoco_head import main

if __name__ == "__main__":
    main()
