"""Kafka's message definitions and kraftlog's annotations, packaged as ``kraftlog._schemas``.

A regular package (not a namespace one) so that ``importlib.resources`` finds the JSON files inside a
wheel or zip shipped with ``spark-submit --py-files`` as well as in an installed environment.
"""
