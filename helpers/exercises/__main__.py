"""``python -m helpers.exercises`` (what ``make progress`` runs): exercise progress per chapter."""

from .progress import main

raise SystemExit(main())
