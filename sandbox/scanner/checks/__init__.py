"""One checker per category of rules; ``base.py`` holds the contract they share."""
