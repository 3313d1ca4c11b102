"""Test-suite root: this folder is on ``sys.path`` (pytest's prepend import mode), so shared helpers such as
``polling`` import from every test folder."""
