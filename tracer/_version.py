"""The version of tftrace, in a module of its own: the stages that write it into their JSON
(report.json, diagnosis.json) take it from here, not from the package above them."""

__version__ = "0.1.0"
