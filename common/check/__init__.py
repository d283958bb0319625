"""`topodra check`: do the drivers of a node speak the same topology language as the machine?

Pure functions from the discovered machine (`common.topology`) and the node's ResourceSlices (any
driver's) to a report: devices matched to the machine (`identity`), the machine's values
(`truth`), per attribute verdicts (`verdicts`), which levels two drivers can align at with
`matchAttribute` (`align`), all assembled in `report`. The command (drivers/cli/check.py) and the
DaemonSet's watch loop (`watch`) add the I/O.
"""

from topodra.common.check.devices import NodeDevices, SliceInputError, node_devices, nodes_of
from topodra.common.check.report import Report, build_report, to_json

__all__ = ["NodeDevices", "Report", "SliceInputError", "build_report", "node_devices", "nodes_of", "to_json"]
