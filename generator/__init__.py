"""tvmgen: put a deep-learning model on a phone with Apache TVM.

The package is imported as ``tvmgen`` but its code lives in the repository's ``generator/`` folder
(pyproject.toml maps one to the other); there is no ``tvmgen/`` folder to look for.
"""

__version__ = "0.1.0"
