"""tvmgen: put a deep-learning model on a phone with Apache TVM."""

__version__ = "0.1.0"
