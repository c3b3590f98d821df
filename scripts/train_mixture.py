"""The name `scripts/train_dblast_head.py` went by: the same command line, the same run (train a DBLAST head)."""

from train_dblast_head import main

if __name__ == "__main__":
    main()
