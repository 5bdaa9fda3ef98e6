"""Every op record: the core table and the tables of the NN and convolution families."""

from __future__ import annotations

import op_records
import op_records_conv
import op_records_nn

RECORDS = op_records.RECORDS + op_records_nn.RECORDS + op_records_conv.RECORDS
