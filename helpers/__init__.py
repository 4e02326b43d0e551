"""Shared code for the PyTorch notebook course.

Modules, each named for its job:

- :mod:`helpers.paths`     where data/ and build/ live
- :mod:`helpers.data`      offline-first, md5-checked datasets (``make data``)
- :mod:`helpers.loading`   what chapter 06's DataLoader workers run (importable under ``spawn``)
- :mod:`helpers.device`    device choice, seeding, the doctor report (``make doctor``)
- :mod:`helpers.models`    models that later chapters reuse
- :mod:`helpers.training`  fit / evaluate / predict loops
- :mod:`helpers.plotting`  image grids, curves, confusion matrices
- :mod:`helpers.report`    a chapter's headline figures for build/report.md
- :mod:`helpers.exercises` exercise checkers and reference solutions
- :mod:`helpers.runner`    ``make run``: execute every notebook, write the report
- :mod:`helpers.authoring` regenerate notebooks from their jupytext sources

Import the submodule you need (``from helpers.data import mnist``); importing
``helpers`` itself stays cheap.
"""

__version__ = "0.1.0"
