"""Ray imported without its notebook noise: in a Jupyter kernel without ipywidgets,
`import ray` imports `tqdm.auto` (which warns "IProgress not found") and logs at INFO
that ipywidgets is missing for its own rich reprs. Neither is the user's business (a
batch's bar is raygent's, text when there are no widgets: `raygent._batch.progress`), as
in a script, where neither is said. Imported first by this package."""

from __future__ import annotations

import logging
import warnings

# Ray's hints about the packages its notebook reprs need (INFO): kept for the asking.
logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found")
    import ray  # noqa: F401
